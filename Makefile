# Every target creates .venv with the machine's python3 and installs kimi-ops into it first;
# nothing else is assumed on the machine (no uv, no poetry).
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.kimi-ops-installed

.PHONY: demo demo-web test test-long test-fast test-real test-web test-docker lint bench clean

# Python writes and reads its bytecode cache in every target: with PYTHONDONTWRITEBYTECODE set
# (some CI images set it), each pytest worker compiles and assertion-rewrites every test module
# again, 19 s of CPU per worker instead of 9 s, and every agent, simulator and bot process the
# tests start compiles bot/ again.
unexport PYTHONDONTWRITEBYTECODE

# The tests mostly wait on subprocesses (agents, simulators, bots), so more workers than a
# 2-core machine's cores: three (four used the cores no better, 1.4 of 2 on average, and made
# the real-time scenarios' margins thinner); tests handed out one at a time (--maxschedchunk 1), the slow ones
# first (tests/conftest.py), so a long test never starts last.
WORKERS := -n 3 --dist load --maxschedchunk 1

$(STAMP): pyproject.toml setup.py
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	@touch $(STAMP)

demo: $(STAMP)
	$(BIN)/python -m bot demo

# The real Slack app, shown as a Slack channel in the browser (the stand-in's page on 127.0.0.1),
# with the demo's session played into it; Ctrl-C stops it.
demo-web: $(STAMP)
	$(BIN)/python -m bot demo --web --script --port $${KIMI_DEMO_WEB_PORT:-8765}

lint: $(STAMP)
	$(BIN)/ruff check bot tests bench migrations
	$(BIN)/ruff format --check bot tests bench migrations
	$(BIN)/mypy

test: lint
	$(BIN)/python -m pytest $(WORKERS) --durations=15

# Everything make test runs, plus the tests marked long: every chaos seed and the long faults.
test-long: lint
	$(BIN)/python -m pytest $(WORKERS) -m "not real_sglang and not docker" --durations=15

# The loop while editing: no real subprocesses, no simulated timings (those are marked slow),
# and a tenth of each property test's examples (the Hypothesis profile in tests/conftest.py).
# Its -m replaces the one in pyproject.toml's addopts, so it leaves out the long tests itself.
test-fast: $(STAMP)
	$(BIN)/python -m pytest -m "not slow and not long and not real_sglang and not docker" \
		--hypothesis-profile=fast -n 2

# Against a real SGLang 0.5.23 on CPU: builds (once, outside .venv) the side virtualenv and the
# tiny model, then runs only the tests marked real_sglang, one at a time (they share the server).
test-real: $(STAMP)
	tests/real_sglang/setup_side_venv.sh
	$(BIN)/python -m pytest -m real_sglang --timeout 1800 tests/real_sglang

# Against a real Docker daemon: tests/docker/setup_docker.sh installs Debian's docker.io when
# there is no dockerd, starts a daemon of its own when none answers and imports the test image;
# the tests marked docker run one at a time (one of them runs make test-real's SGLang in a
# container, so its side virtualenv is built first, once); the daemon the script started is
# stopped after them, whether they passed or not.
test-docker: $(STAMP)
	tests/real_sglang/setup_side_venv.sh
	tests/docker/setup_docker.sh start
	@rc=0; DOCKER_HOST=$$(cat $${KIMI_DOCKER_STATE:-/run/kimi-ops-docker}/docker_host) \
		$(BIN)/python -m pytest -m docker --timeout 1800 tests/docker || rc=$$?; \
		tests/docker/setup_docker.sh stop; exit $$rc

# The channel page in a real browser: Debian's chromium (installed here when missing, as root,
# with a colour emoji font so the screenshots show what Slack shows) driven by Playwright for
# Python (the .[web] extra; it never downloads a browser of its own).
WEB_STAMP := $(VENV)/.kimi-ops-web-installed
$(WEB_STAMP): $(STAMP)
	@{ command -v chromium && dpkg -s fonts-noto-color-emoji; } >/dev/null 2>&1 || { apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium fonts-noto-color-emoji >/dev/null; }
	$(BIN)/python -m pip install --quiet -e '.[dev,web]'
	@touch $(WEB_STAMP)

test-web: $(WEB_STAMP)
	$(BIN)/python -m pytest -m web tests/web

# One JSON line per script on stdout (bench/_*.py are their helpers); the load average before
# and after each on stderr, since the figures move with it on a shared machine.
bench: $(STAMP)
	@set -e; for script in bench/[!_]*.py; do \
		echo "# $$script: $$(uptime)" >&2; \
		$(BIN)/python $$script; \
		echo "# $$script done: $$(uptime)" >&2; \
	done

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache .hypothesis
