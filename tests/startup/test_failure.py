"""Failure classification: each kind from SGLang's own texts, and specific kinds win over crash."""

from __future__ import annotations

import itertools

import pytest

from bot import vocab
from bot.startup import FailureKind, FailureSeen, build_report
from tests.startup.conftest import LOGS, parse_all

EXCEPTION = (
    "[2026-03-02 10:45:43 TP0] Scheduler hit an exception: Traceback (most recent call last):\n"
)
HOST = (
    "ValueError: Not enough host memory available. Requesting 300.00 GB but only have 54.32 GB "
    "free. Please reduce the size of the hierarchical cache.\n"
)
SIGQUIT = (
    "[2026-03-02 10:45:43] Received sigquit from a child process. It usually means the child "
    "failed.\n"
)


def _failure(text: str) -> tuple[FailureKind, tuple[str, ...]] | None:
    failure = build_report(parse_all(text)).failure
    return None if failure is None else (failure.kind, failure.lines)


@pytest.mark.parametrize(
    ("line", "kind"),
    [
        (HOST, FailureKind.HOST_MEMORY),
        (
            "AssertionError: The host memory should be larger than the device memory with the "
            "current protocol\n",
            FailureKind.HOST_MEMORY,
        ),
        (
            "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.\n",
            FailureKind.GPU_MEMORY,
        ),
        (
            "Exception: Capture cuda graph failed: CUDA out of memory. Tried to allocate 2 GiB\n",
            FailureKind.GPU_MEMORY,
        ),
        (
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.17 GiB. GPU 3 has a "
            "total capacity of 94.97 GiB of which 312.00 MiB is free.\n",
            FailureKind.GPU_MEMORY,
        ),
        (
            "ValueError: The memory capacity is unbalanced. Some GPUs may be occupied by other "
            "processes. min_per_gpu_memory=61.34, local_gpu_memory=94.97\n",
            FailureKind.GPU_BUSY,
        ),
        ("RuntimeError: NCCL error: unhandled system error\n", FailureKind.CRASH),
    ],
)
def test_each_kind_from_its_sglang_text(line: str, kind: FailureKind) -> None:
    """The exception line after `Scheduler hit an exception` decides the kind."""
    result = _failure(EXCEPTION + line + SIGQUIT)
    assert result is not None
    assert result[0] is kind
    assert result[1] == (EXCEPTION.rstrip("\n"), line.rstrip("\n"), SIGQUIT.rstrip("\n"))


@pytest.mark.parametrize("order", list(itertools.permutations([EXCEPTION, HOST, SIGQUIT])))
def test_specific_kind_wins_whatever_the_order(order: tuple[str, ...]) -> None:
    """host_memory is the verdict in every order the three lines can arrive in."""
    result = _failure("".join(order))
    assert result is not None
    assert result[0] is FailureKind.HOST_MEMORY
    assert len(result[1]) == 3


def test_sigquit_alone_is_a_crash() -> None:
    """The parent's sigquit line with no cause named is a crash."""
    assert _failure(SIGQUIT) == (FailureKind.CRASH, (SIGQUIT.rstrip("\n"),))


def test_died_with_sigkill_is_oom_killed_and_other_codes_crash() -> None:
    """`exit code: -9` means killed (the OOM killer's signal); `exit code: 1` is a crash."""
    died = (
        "[2026-03-03 14:11:42] Rank 3 scheduler died during initialization (exit code: {code}). "
        "If exit code is -9 (SIGKILL), a common cause is the OS OOM killer.\n"
    )
    assert _failure(died.format(code=-9))[0] is FailureKind.OOM_KILLED  # type: ignore[index]
    assert _failure(died.format(code=1))[0] is FailureKind.CRASH  # type: ignore[index]


def test_0_5_9_dead_scheduler_with_exit_code_minus_9_is_oom_killed() -> None:
    """0.5.9's `scheduler is dead` then `Exit code: -9` is a kill, shown with the rank's pool."""
    text = (
        "[2026-02-24 10:47:12 TP0] Allocating 300.00 GB host memory for hierarchical KV cache.\n"
        "[2026-02-24 10:49:30] Rank 0 scheduler is dead. Please check if there are relevant logs.\n"
        "[2026-02-24 10:49:31] Exit code: -9\n"
    )
    result = _failure(text)
    assert result is not None
    assert result[0] is FailureKind.OOM_KILLED
    assert result[1][0].endswith("Allocating 300.00 GB host memory for hierarchical KV cache.")
    assert result[1][-1] == "[2026-02-24 10:49:31] Exit code: -9"


def test_a_traceback_after_ready_is_not_a_failed_start() -> None:
    """A request's error traceback once the server is serving does not fail the start."""
    text = (
        "[2026-02-24 11:26:38] The server is fired up and ready to roll!\n"
        "Traceback (most recent call last):\n"
        "KeyError: 'messages'\n"
    )
    assert _failure(text) is None


def test_failure_events_are_reemitted_as_lines_add_up_and_capped() -> None:
    """Each new decisive line re-emits the failure; repeated texts count once; 16 lines at most."""
    repeated = "".join(f"[2026-03-02 10:45:43 TP{r}] {EXCEPTION[26:]}" for r in range(8))
    distinct = "".join(f"RuntimeError: NCCL error on rank {r}\n" for r in range(30))
    seen = [e for e in parse_all(repeated + HOST + distinct) if isinstance(e, FailureSeen)]
    assert [len(e.lines) for e in seen] == list(range(1, 17))
    assert sum("Scheduler hit an exception" in line for line in seen[-1].lines) == 1
    assert seen[-1].kind is FailureKind.HOST_MEMORY


def test_failure_kinds_are_the_shared_vocabulary_and_only_the_logs_kinds() -> None:
    """bot.startup's FailureKind is bot.vocab's, and every fixture's failures are of the kinds
    the log can tell (LOG_FAILURE_KINDS)."""
    assert FailureKind is vocab.FailureKind
    kinds = {
        event.kind
        for path in LOGS.glob("*.log")
        for event in parse_all(path.read_text(encoding="utf-8"))
        if isinstance(event, FailureSeen)
    }
    assert kinds
    assert kinds <= vocab.LOG_FAILURE_KINDS


UVICORN_BIND = (
    "ERROR:    [Errno 98] error while attempting to bind on address ('0.0.0.0', 30000): "
    "address already in use\n"
)
PORT_ARGS = (
    "[2026-03-02 10:45:43] Port is already in use. dist_init_port=30005 port_base=30001 "
    "detokenizer_port=30002 nccl_port=30003 scheduler_input_port=30004\n"
    "Traceback (most recent call last):\n"
    '  File ".../sglang/srt/server_args.py", line 872, in init_new\n'
    "ValueError: port_base at 30001 is not available in 30 seconds. port_base is used by a "
    "process already.\n"
)


def test_a_taken_http_port_is_port_in_use_with_its_line() -> None:
    """uvicorn's bind error gives port_in_use and keeps its line, even when the kill of the
    tree that follows logs a rank dead of SIGKILL (failed before the fix: no decisive line, the
    start was reported an unknown death in host_pool)."""
    died = (
        "[2026-03-02 10:45:44] Rank 0 scheduler died during initialization (exit code: -9). "
        "If exit code is -9 (SIGKILL), a common cause is the OS Out Of Memory (OOM) killer.\n"
    )
    found = _failure(HOST_LINE + UVICORN_BIND + died)
    assert found is not None
    kind, lines = found
    assert kind is FailureKind.PORT_IN_USE
    assert UVICORN_BIND.strip() in lines


def test_sglangs_own_port_check_is_port_in_use_with_the_exception_line() -> None:
    """SGLang's check of its internal ports ("Port is already in use.", then the ValueError
    naming the port) gives port_in_use with both lines (failed before the fix: a crash)."""
    found = _failure(PORT_ARGS)
    assert found is not None
    kind, lines = found
    assert kind is FailureKind.PORT_IN_USE
    assert any("Port is already in use." in line for line in lines)
    assert any(line.startswith("ValueError: port_base at 30001") for line in lines)


HOST_LINE = "[2026-03-02 10:45:40 TP0] Allocating 44.77 GB host memory for hierarchical KV cache.\n"
