"""``mtpstudio-helper [--root DIR] VERB [NAME]``: the verbs, their payloads, the exit codes.

Every install verb takes a JSON object of parameters on stdin (at most 256 KiB), never the text
of a file: the helper builds each file itself from those values, after checking every one of
them, with the code mtpstudio's renderer uses too (``helper.unit_shape``,
``helper.session_shape``, ``helper.profile_shape``).

* ``install-session NAME``: ``variant``, ``sessions_dir``, ``plasma_session`` (the
  distribution's Plasma session file, whose ``Exec=`` the wrapper runs), ``igpu_card``,
  ``llvmpipe_threads``, optional ``desktop_vram``; NAME is the variant's file name.
* ``install-unit NAME``: ``env_name``, ``user``, ``model_file``, ``argv``, ``arg_groups``,
  ``notes``, ``warnings``, ``mlock``, ``loopback``, ``env``; NAME is ``mtpstudio-….service``
  and no unit of that name may exist in the distribution's unit folders.
* ``install-nvidia-profile NAME``: ``processes``.

The answer is JSON on stdout. Exit 0 done, 2 refused (one line on stderr saying why), 1 failed.
``--root DIR`` treats DIR as ``/`` and is refused under pkexec.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from typing import IO, Any

from mtpstudio.helper.constants import (
    GROUP_SUFFIX,
    MAX_PAYLOAD_BYTES,
    NVIDIA_PROFILE_DIR,
    STATE_DIR,
    SYSTEM_UNIT_DIR,
)
from mtpstudio.helper.faults import Faults
from mtpstudio.helper.profile_shape import nvidia_profile_from_params, render_nvidia_profile
from mtpstudio.helper.safefs import Refused
from mtpstudio.helper.sddm import allowed_session_dir, session_dirs, system_layout
from mtpstudio.helper.session_shape import (
    render_session_desktop,
    render_session_wrapper,
    session_from_params,
)
from mtpstudio.helper.store import Change, FileSpec, RollbackIncomplete, Store
from mtpstudio.helper.unit_shape import render_env, render_unit, system_unit_from_params
from mtpstudio.helper.validate import check_name, text_of

USAGE = "usage: mtpstudio-helper [--root DIR] VERB [NAME] (content on stdin)"
VERBS = {f"{action}-{group}" for action in ("install", "remove") for group in GROUP_SUFFIX}
VERBS.add("status")
EXIT_DONE, EXIT_FAILED, EXIT_REFUSED = 0, 1, 2


def parse_args(argv: Sequence[str], environ: Mapping[str, str]) -> tuple[str, str, str | None]:
    """(root, verb, name) from the command line; refuses anything else."""
    args = list(argv)
    root = "/"
    if args and (args[0] == "--root" or args[0].startswith("--root=")):
        if args[0] == "--root":
            if len(args) < 2:
                raise Refused("--root needs a directory")
            root, args = args[1], args[2:]
        else:
            root, args = args[0].split("=", 1)[1], args[1:]
        if environ.get("PKEXEC_UID") is not None:
            raise Refused("--root is not accepted when run through pkexec")
        if not root.startswith("/") or "\n" in root:
            raise Refused("--root needs an absolute directory")
    if not args or args[0] not in VERBS:
        raise Refused(USAGE)
    verb, rest = args[0], args[1:]
    if verb == "status":
        if rest:
            raise Refused("status takes no NAME")
        return root, verb, None
    if len(rest) != 1:
        raise Refused(f"{verb} needs exactly one NAME")
    name = rest[0]
    check_name(name, GROUP_SUFFIX[verb.split("-", 1)[1]])
    return root, verb, name


def read_payload(stdin: IO[bytes]) -> bytes:
    """Stdin, refused beyond 256 KiB (never read further than that)."""
    data = stdin.read(MAX_PAYLOAD_BYTES + 1)
    if len(data) > MAX_PAYLOAD_BYTES:
        raise Refused(f"the input is larger than {MAX_PAYLOAD_BYTES // 1024} KiB")
    if not data:
        raise Refused("no content on stdin")
    return data


def _json_object(data: bytes) -> dict[str, Any]:
    try:
        value = json.loads(text_of(data, "the input"))
    except (ValueError, RecursionError):
        raise Refused("the input is not a JSON object") from None
    if not isinstance(value, dict):
        raise Refused("the input is not a JSON object")
    return value


def _string(payload: Mapping[str, Any], key: str) -> str:
    value = payload.get(key)
    if not isinstance(value, str):
        raise Refused(f"the input has no text for {key!r}")
    return value


def measurement_name(session_file: str) -> str:
    """The stored before-measurement of a session, next to the manifest."""
    return f"desktop-vram-{session_file.removesuffix('.desktop')}.json"


def session_group(root: str, name: str, data: bytes) -> list[FileSpec]:
    """The wrapper, the session file and the measurement of ``install-session NAME``."""
    payload = _json_object(data)
    sessions_dir = _string(payload, "sessions_dir")
    kind = allowed_session_dir(root, sessions_dir)
    configured = session_dirs(root).dirs.get(kind, ())
    shape = session_from_params(name, payload, root, configured)
    if shape.facts.kind != kind:
        raise Refused(f"{sessions_dir} holds {kind}, not the {shape.variant} session")
    files = [
        FileSpec(shape.wrapper_path, render_session_wrapper(shape).encode(), 0o755),
        FileSpec(shape.desktop_path, render_session_desktop(shape).encode(), 0o644),
    ]
    vram = payload.get("desktop_vram")
    if vram is not None:
        if not isinstance(vram, dict):
            raise Refused("desktop_vram must be a JSON object")
        text = json.dumps(vram, indent=2, sort_keys=True) + "\n"
        files.append(FileSpec(f"/{STATE_DIR}/{measurement_name(name)}", text.encode(), 0o644))
    return files


def unit_group(root: str, name: str, data: bytes) -> list[FileSpec]:
    """The environment file and the unit of ``install-unit NAME``."""
    shape = system_unit_from_params(name, _json_object(data), root)
    return [
        FileSpec(shape.env_path, render_env(name, shape.env).encode(), 0o644),
        FileSpec(f"{SYSTEM_UNIT_DIR}/{name}", render_unit(shape).encode(), 0o644),
    ]


def nvidia_group(name: str, data: bytes) -> list[FileSpec]:
    """The profile file of ``install-nvidia-profile NAME``."""
    processes = nvidia_profile_from_params(name, _json_object(data))
    text = render_nvidia_profile(processes)
    return [FileSpec(f"{NVIDIA_PROFILE_DIR}/{name}", text.encode(), 0o644)]


def _daemon_reload() -> str:
    try:
        result = subprocess.run(
            ["systemctl", "daemon-reload"], capture_output=True, timeout=60, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"not done ({exc})"
    return "done" if result.returncode == 0 else f"failed (exit status {result.returncode})"


def execute(
    root: str, verb: str, name: str | None, stdin: IO[bytes], faults: Faults
) -> dict[str, Any]:
    """Run one verb; returns the JSON answer. Raises Refused or OSError."""
    layout = system_layout(root)
    if verb == "status":
        with Store.open(layout, faults, write=False) as store:
            return store.status()
    assert name is not None
    action, group = verb.split("-", 1)
    key = f"{group}:{name}"
    changes: list[Change]
    if action == "install":
        data = read_payload(stdin)
        if group == "session":
            files = session_group(root, name, data)
        elif group == "unit":
            files = unit_group(root, name, data)
        else:
            files = nvidia_group(name, data)
        with Store.open(layout, faults, write=True) as store:
            changes = store.install(key, files)
    else:
        with Store.open(layout, faults, write=True) as store:
            changes = store.revert(key)
    answer: dict[str, Any] = {
        "group": key,
        "changes": [{"path": layout.shown(c.path), "action": c.action} for c in changes],
    }
    if group == "unit" and root == "/":
        answer["daemon_reload"] = _daemon_reload()
    return answer


def one_line(text: str) -> str:
    return " ".join(str(text).split())


def run(
    argv: Sequence[str],
    stdin: IO[bytes],
    stdout: IO[str],
    stderr: IO[str],
    environ: Mapping[str, str],
) -> int:
    """The whole helper with its streams and environment passed in."""
    verb = ""
    try:
        root, verb, name = parse_args(argv, environ)
        answer = execute(root, verb, name, stdin, Faults.from_environ(environ))
    except Refused as exc:
        stderr.write(f"mtpstudio-helper: refused: {one_line(str(exc))}\n")
        return EXIT_REFUSED
    except RollbackIncomplete as exc:
        code = EXIT_REFUSED if isinstance(exc.cause, Refused) else EXIT_FAILED
        how = "refused" if code == EXIT_REFUSED else "failed"
        stderr.write(f"mtpstudio-helper: {how}: {one_line(str(exc))}; see `status`\n")
        return code
    except OSError as exc:
        where = f" ({exc.filename})" if exc.filename else ""
        # An install that failed has been rolled back (RollbackIncomplete says otherwise).
        undone = "; nothing was changed" if verb.startswith("install-") else ""
        text = one_line(exc.strerror or str(exc))
        stderr.write(f"mtpstudio-helper: failed: {text}{where}{undone}\n")
        return EXIT_FAILED
    except Exception as exc:  # the helper must always answer with one line
        stderr.write(f"mtpstudio-helper: failed: {one_line(f'{type(exc).__name__}: {exc}')}\n")
        return EXIT_FAILED
    stdout.write(json.dumps(answer, indent=2, sort_keys=True) + "\n")
    return EXIT_DONE


def main(argv: Sequence[str] | None = None) -> int:
    """Console entry point ``mtpstudio-helper``."""
    os.umask(0o022)
    return run(
        sys.argv[1:] if argv is None else argv,
        sys.stdin.buffer,
        sys.stdout,
        sys.stderr,
        os.environ,
    )
