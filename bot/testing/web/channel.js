// The channel page: draws the stand-in's channel as Slack's client would and sends what the
// person types or clicks to the stand-in, which signs it and posts it to the app.
"use strict";

const state = { me: null, data: null, busy: false, again: false, nodes: new Map(), seen: {} };

function $(id) { return document.getElementById(id); }

function escapeHtml(text) {
  return text.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;")
    .replace(/"/g, "&quot;");
}

// Slack's texts carry &amp; &lt; &gt; for the three characters it reserves.
function unescapeSlack(text) {
  return text.replace(/&lt;/g, "<").replace(/&gt;/g, ">").replace(/&amp;/g, "&");
}

function nameOf(id) {
  const data = state.data;
  if (data && data.app.id === id) return data.app.name;
  const person = data && data.people.find((p) => p.id === id);
  return person ? person.name : id;
}

// <@U123>, <#C123|ops>, <!here>, <https://x|label>, <https://x>: one control sequence as HTML.
function controlSequence(inner) {
  const [target, label] = inner.split("|", 2);
  if (target.startsWith("@")) {
    return `<span class="mention">@${escapeHtml(nameOf(target.slice(1)))}</span>`;
  }
  if (target.startsWith("#")) {
    return `<span class="mention">#${escapeHtml(label || target.slice(1))}</span>`;
  }
  if (target.startsWith("!")) {
    const word = target.slice(1).split("^")[0];
    return `<span class="mention">@${escapeHtml(label || word)}</span>`;
  }
  const url = unescapeSlack(target);
  const safe = /^(https?|mailto):/i.test(url) ? url : "#";
  return `<a href="${escapeHtml(safe)}" target="_blank" rel="noopener">${escapeHtml(unescapeSlack(label || target))}</a>`;
}

// The shortcodes kimi-ops' messages use, as the emoji Slack draws for them.
const EMOJI = {
  x: "\u274C", white_check_mark: "\u2705", warning: "\u26A0\uFE0F", electric_plug: "\uD83D\uDD0C",
  leftwards_arrow_with_hook: "\u21A9\uFE0F", outbox_tray: "\uD83D\uDCE4", inbox_tray: "\uD83D\uDCE5",
  no_entry: "\u26D4", no_entry_sign: "\uD83D\uDEAB", hourglass: "\u231B",
  hourglass_flowing_sand: "\u23F3", arrows_counterclockwise: "\uD83D\uDD04",
  large_green_circle: "\uD83D\uDFE2", heavy_minus_sign: "\u2796", grey_question: "\u2754",
  chart_with_upwards_trend: "\uD83D\uDCC8", calendar: "\uD83D\uDCC6", bulb: "\uD83D\uDCA1",
  rocket: "\uD83D\uDE80", red_circle: "\uD83D\uDD34", large_yellow_circle: "\uD83D\uDFE1",
};

function emoji(html) {
  return html.replace(/:([a-z0-9_+-]+):/g, (whole, name) => (
    EMOJI[name] ? `<span class="emoji" title=":${name}:">${EMOJI[name]}</span>` : whole));
}

// Bold, italic and strike on text that holds no code and no control sequence.
function emphasis(html) {
  return html
    .replace(/(^|[\s(>])\*(?!\s)([^*\n]+?)\*(?=$|[\s).,:;!?<])/g, "$1<b>$2</b>")
    .replace(/(^|[\s(>])_(?!\s)([^_\n]+?)_(?=$|[\s).,:;!?<])/g, "$1<i>$2</i>")
    .replace(/(^|[\s(>])~(?!\s)([^~\n]+?)~(?=$|[\s).,:;!?<])/g, "$1<s>$2</s>");
}

function inline(text) {
  // Split out `code` first: nothing inside it is formatted.
  return text.split(/(`[^`\n]+`)/).map((part) => {
    if (part.length > 1 && part.startsWith("`") && part.endsWith("`")) {
      return `<code>${escapeHtml(unescapeSlack(part.slice(1, -1)))}</code>`;
    }
    const pieces = part.split(/<([^<>]+)>/);
    let html = "";
    for (let i = 0; i < pieces.length; i++) {
      html += i % 2 ? controlSequence(pieces[i]) : escapeHtml(unescapeSlack(pieces[i]));
    }
    return emoji(emphasis(html));
  }).join("");
}

function mrkdwn(text) {
  const parts = text.split("```");
  return parts.map((part, i) => {
    if (i % 2) return `<pre>${escapeHtml(unescapeSlack(part.replace(/^\n/, "")))}</pre>`;
    const lines = part.split("\n").map((line) => (
      line.startsWith("&gt; ") || line.startsWith("> ")
        ? `<blockquote>${inline(line.replace(/^(&gt;|>) /, ""))}</blockquote>`
        : inline(line)));
    return lines.join("<br>").replace(/<\/blockquote><br>/g, "</blockquote>");
  }).join("");
}

function textObject(object) {
  if (!object) return "";
  if (object.type === "mrkdwn") return mrkdwn(object.text || "");
  return escapeHtml(object.text || "");
}

function button(element, message) {
  const style = element.style ? ` ${element.style}` : "";
  const attrs = [
    `data-action-id="${escapeHtml(element.action_id || "")}"`,
    `data-value="${escapeHtml(element.value || "")}"`,
    `data-ts="${escapeHtml(message.ts || "")}"`,
  ].join(" ");
  return `<button class="btn${style}" type="button" ${attrs}>${textObject(element.text)}</button>`;
}

function element(el, message) {
  if (el.type === "button") return button(el, message);
  if (el.type === "image") {
    return `<img src="${escapeHtml(el.image_url || "")}" alt="${escapeHtml(el.alt_text || "")}">`;
  }
  if (el.type === "mrkdwn" || el.type === "plain_text") return `<span>${textObject(el)}</span>`;
  return `<span class="unsupported">[unsupported element: ${escapeHtml(String(el.type))}]</span>`;
}

function block(b, message) {
  const kind = b.type;
  if (kind === "section") {
    let html = b.text ? `<div>${textObject(b.text)}</div>` : "";
    if (b.fields) html += `<div class="fields">${b.fields.map((f) => `<div>${textObject(f)}</div>`).join("")}</div>`;
    if (b.accessory) html += `<div>${element(b.accessory, message)}</div>`;
    return `<div class="block block-section">${html}</div>`;
  }
  if (kind === "header") return `<div class="block block-header">${textObject(b.text)}</div>`;
  if (kind === "divider") return `<hr class="block-divider">`;
  if (kind === "context") {
    return `<div class="block block-context">${(b.elements || []).map((el) => element(el, message)).join("")}</div>`;
  }
  if (kind === "actions") {
    return `<div class="block block-actions">${(b.elements || []).map((el) => element(el, message)).join("")}</div>`;
  }
  if (kind === "image") {
    const title = b.title ? `<div class="file-title">${textObject(b.title)}</div>` : "";
    return `<div class="block block-image">${title}<img src="${escapeHtml(b.image_url || "")}" alt="${escapeHtml(b.alt_text || "")}"></div>`;
  }
  return `<div class="block unsupported">[unsupported block: ${escapeHtml(String(kind))}]</div>`;
}

function files(message) {
  return (message.files || []).map((f) => (
    `<div class="file"><div class="file-title">${escapeHtml(f.title)}</div>` +
    (f.image ? `<img src="${escapeHtml(f.url)}" alt="${escapeHtml(f.title)}">`
             : `<a href="${escapeHtml(f.url)}">${escapeHtml(f.title)}</a>`) + `</div>`)).join("");
}

function clock(ts) {
  // The stand-in's ts count up from a fixed second: show the time the page received it.
  const seen = state.seen[ts] || (state.seen[ts] = new Date());
  return seen.toTimeString().slice(0, 5);
}

function content(message) {
  const blocks = message.blocks || [];
  const body = blocks.length ? blocks.map((b) => block(b, message)).join("")
                             : `<div class="block">${mrkdwn(message.text || "")}</div>`;
  return body + files(message);
}

function messageInner(message, extra) {
  const edited = message.edits ? ` <span class="edited">(edited)</span>` : "";
  return `<div class="avatar">K</div>
    <div class="body">
      ${extra.only ? `<div class="only-you">Only visible to you</div>` : ""}
      <div class="meta"><span class="sender">${escapeHtml(state.data.app.name)}</span>
        <span class="app-badge">APP</span><span class="time">${clock(message.ts || "e" + message.seq)}</span>${edited}</div>
      <div class="content">${content(message)}</div>
      ${extra.thread || ""}
    </div>`;
}

function messageHtml(message, extra) {
  return `<div class="message" data-ts="${escapeHtml(message.ts || "")}" data-kind="reply" data-edits="${message.edits || 0}">${messageInner(message, extra)}</div>`;
}

// One element per message, kept across redraws: a message edited in place keeps its element
// (only what it holds is redrawn), as a reader's eye and a test's locator expect.
function place(list, key, attrs, inner, index) {
  let node = state.nodes.get(key);
  if (!node) {
    node = document.createElement("div");
    state.nodes.set(key, node);
  }
  for (const [name, value] of Object.entries(attrs)) {
    if (node.getAttribute(name) !== value) node.setAttribute(name, value);
  }
  if (node.dataset.html !== inner) {
    node.innerHTML = inner;
    node.dataset.html = inner;
  }
  if (list.children[index] !== node) list.insertBefore(node, list.children[index] || null);
}

function render() {
  const data = state.data;
  $("channel-name").textContent = `# ${data.channel.name}`;
  const list = $("messages");
  const atBottom = list.scrollHeight - list.scrollTop - list.clientHeight < 40;
  const parents = data.messages.filter((m) => !m.thread_ts || m.thread_ts === m.ts);
  const items = parents.map((m) => {
    const replies = data.messages.filter((r) => r.thread_ts === m.ts && r.ts !== m.ts);
    const thread = replies.length
      ? `<div class="reply-count">${replies.length} ${replies.length === 1 ? "reply" : "replies"}</div>` +
        `<div class="thread">${replies.map((r) => messageHtml(r, {})).join("")}</div>`
      : "";
    return { seq: m.seq, key: `m${m.ts}`, kind: "message", message: m, extra: { thread } };
  });
  for (const e of data.ephemerals) {
    items.push({ seq: e.seq, key: `e${e.seq}`, kind: "ephemeral", message: e, extra: { only: true } });
  }
  items.sort((a, b) => a.seq - b.seq);
  const keep = new Set(items.map((i) => i.key));
  for (const [key, node] of state.nodes) {
    if (!keep.has(key)) { node.remove(); state.nodes.delete(key); }
  }
  const empty = list.querySelector(".empty");
  if (empty && items.length) empty.remove();
  items.forEach((item, index) => {
    const attrs = {
      class: `message${item.kind === "ephemeral" ? " ephemeral" : ""}`,
      "data-kind": item.kind,
      "data-ts": item.message.ts || "",
      "data-seq": String(item.seq),
      "data-edits": String(item.message.edits || 0),
    };
    place(list, item.key, attrs, messageInner(item.message, item.extra), index);
  });
  if (!items.length && !empty) {
    list.innerHTML = `<div class="empty">No messages yet. Type <code>/kimi help</code> below.</div>`;
  }
  if (atBottom) list.scrollTop = list.scrollHeight;
  document.body.dataset.version = String(data.version);
}

async function refresh() {
  // One fetch at a time; a change that lands meanwhile fetches once more after it.
  if (state.busy) { state.again = true; return; }
  state.busy = true;
  try {
    do {
      state.again = false;
      const answer = await fetch(`/ui/state?user=${encodeURIComponent(state.me)}`, { cache: "no-store" });
      if (answer.ok) { state.data = await answer.json(); render(); }
    } while (state.again);
  } finally {
    state.busy = false;
  }
}

async function post(route, body) {
  const answer = await fetch(`/ui/${route}`, {
    method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body),
  });
  const json = await answer.json();
  if (!answer.ok || !json.ok) {
    $("composer-hint").textContent = json.error || `the app answered HTTP ${json.app_status}`;
  } else {
    $("composer-hint").textContent = "";
  }
  return json;
}

function people() {
  const select = $("user-switcher");
  select.innerHTML = state.data.people.map((p) => (
    `<option value="${escapeHtml(p.id)}">${escapeHtml(p.name)}</option>`)).join("");
  select.value = state.me;
  showRole();
}

function showRole() {
  const person = state.data.people.find((p) => p.id === state.me);
  $("user-role").textContent = person ? person.role : "";
}

async function start() {
  const params = new URLSearchParams(location.search);
  state.me = params.get("user") || "";
  const first = await fetch(`/ui/state${state.me ? `?user=${encodeURIComponent(state.me)}` : ""}`);
  state.data = await first.json();
  state.me = state.data.me;
  people();
  render();
  $("user-switcher").addEventListener("change", (event) => {
    state.me = event.target.value;
    showRole();
    refresh();
  });
  $("composer").addEventListener("submit", async (event) => {
    event.preventDefault();
    const input = $("composer-input");
    const typed = input.value.trim();
    const match = typed.match(/^\/kimi(?:\s+([\s\S]*))?$/);
    if (!match) {
      $("composer-hint").textContent = "Only /kimi commands reach the app here: try /kimi help";
      return;
    }
    input.value = "";
    await post("command", { user: state.me, text: (match[1] || "").trim() || "help" });
  });
  $("messages").addEventListener("click", async (event) => {
    const target = event.target.closest("button.btn");
    if (!target) return;
    // Disabled while the app takes the click, as Slack's client does; the app's answer (an
    // edit of the message, or a reply to the clicker) says what became of it.
    target.disabled = true;
    try {
      await post("click", {
        user: state.me, ts: target.dataset.ts, action_id: target.dataset.actionId,
        value: target.dataset.value,
      });
    } finally {
      target.disabled = false;
    }
  });
  const events = new EventSource("/ui/events");
  events.addEventListener("open", () => $("live").classList.add("on"));
  events.addEventListener("error", () => $("live").classList.remove("on"));
  events.addEventListener("changed", () => refresh());
}

start();
