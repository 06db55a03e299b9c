"""The helper's record of what it changed: manifest, backups and install/revert of file groups.

A group (``session:NAME``, ``unit:NAME``, ``nvidia-profile:NAME``) is a set of files written
together. Installing backs up every file that existed before (``backups/``, each named by the
sha256 of its content), records the group in the manifest, writes every new file next to its
target, and only then renames them into place: a full disk stops the install before anything is
replaced, and the manifest is put back by a rename that needs no space. Reverting checks
everything first (the manifest's rules, each backup against its hash, each file it would touch),
then restores the backups or removes the files and drops the group. Every step is atomic and a
rerun after a crash finishes the job. The manifest is read back as hostile input
(``helper.manifest``).
"""

from __future__ import annotations

import datetime as _dt
import fcntl
import hashlib
import json
import os
import stat
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from typing import Any

from mtpstudio.helper.constants import STATE_DIR, SYSTEM_GROUP_FOLDERS, FolderRule
from mtpstudio.helper.faults import Faults
from mtpstudio.helper.manifest import (
    MAX_FILE_BYTES,
    RESTORED_MODE_BITS,
    backup_digest_prefix,
    check_manifest,
)
from mtpstudio.helper.safefs import (
    Refused,
    check_regular_or_absent,
    commit_staged,
    components,
    entry_stat,
    open_root,
    opened_dir,
    read_regular,
    remove_empty_dir,
    stage_file,
    sweep_temp_files,
    unlink_file,
    walk,
    write_atomic,
)
from mtpstudio.helper.validate import check_installed

MANIFEST = "manifest.json"
BACKUPS = "backups"
LOCK = "lock"
MAX_MANIFEST_BYTES = 1024 * 1024


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclass(frozen=True)
class Layout:
    """Where the tree is: ``root`` stands for ``/``; the state folder may live elsewhere.

    The system layout keeps state in ``ROOT/var/lib/mtpstudio``; user-level installs pass
    their XDG state folder as ``state_root`` with ``state_rel`` ``""``.
    """

    root: str = "/"
    state_root: str | None = None
    state_rel: str = STATE_DIR
    folders: Mapping[str, tuple[FolderRule, ...]] = field(
        default_factory=lambda: SYSTEM_GROUP_FOLDERS
    )
    """The folders each kind of group may write (``SYSTEM_GROUP_FOLDERS`` for the system, plus
    the session folder the installed SDDM's own configuration names: ``sddm.system_layout``)."""
    system: bool = True
    """The system tree (units run as a system service); False for a user's own files."""

    def shown(self, path: str) -> str:
        """The real path of a root-relative ``/…`` path."""
        return os.path.join(self.root, path.lstrip("/")) if self.root != "/" else path


@dataclass(frozen=True)
class FileSpec:
    """One file of a group: absolute path as seen from the root, content, mode."""

    path: str
    data: bytes
    mode: int


@dataclass(frozen=True)
class Change:
    """What happened to one file: created, replaced, removed, restored or unchanged."""

    path: str
    action: str


def _split(path: str) -> tuple[str, str]:
    parts = components(path)
    if not parts:
        raise Refused(f"{path!r} is not a file path")
    return "/".join(parts[:-1]), parts[-1]


def _empty_manifest() -> dict[str, Any]:
    return {"schema": 1, "groups": {}, "created_dirs": []}


def _now() -> str:
    return _dt.datetime.now(_dt.UTC).replace(microsecond=0).isoformat()


class RollbackIncomplete(Exception):
    """An install failed and putting things back failed too; ``cause`` is the first failure."""

    def __init__(self, cause: BaseException, rollback: BaseException) -> None:
        super().__init__(f"{_reason(cause)}; undoing it failed too ({_reason(rollback)})")
        self.cause = cause


def _reason(exc: BaseException) -> str:
    if isinstance(exc, OSError):
        where = f" ({exc.filename})" if exc.filename else ""
        return f"{exc.strerror or exc}{where}"
    return str(exc)


@dataclass
class _Progress:
    """How far an install got: what a rollback has to undo."""

    undo: str | None = None  # a temp copy of the manifest as it was
    new_dirs: tuple[str, ...] = ()
    recorded: bool = False  # the manifest names the group
    committed: bool = False  # a target may have been replaced


@dataclass(frozen=True)
class _Step:
    """What revert will do to one file, decided before anything is touched."""

    entry: dict[str, Any]
    action: str  # "restore", "remove" or "unchanged"
    backup: bytes | None = None


class Store:
    """An open, locked state folder and the root it describes (use ``Store.open``)."""

    def __init__(self, layout: Layout, faults: Faults, root_fd: int, state_fd: int | None):
        self.layout = layout
        self.faults = faults
        self.root_fd = root_fd
        self.state_fd = state_fd
        self.manifest: dict[str, Any] = _empty_manifest()

    # ---------------------------------------------------------------- opening

    @classmethod
    @contextmanager
    def open(cls, layout: Layout, faults: Faults, *, write: bool) -> Iterator[Store]:
        """Open the root and the state folder; ``write`` creates it and takes the lock."""
        root_fd = open_root(layout.root)
        state_base = open_root(layout.state_root) if layout.state_root else os.dup(root_fd)
        state_fd: int | None = None
        lock_fd: int | None = None
        try:
            parent = "/".join(components(layout.state_rel)[:-1])
            if layout.state_rel and write:
                with opened_dir(state_base, parent) as pfd:
                    if pfd is None:
                        raise Refused(f"{layout.shown('/' + parent)} does not exist")
            state_fd = walk(state_base, layout.state_rel, create=write)
            store = cls(layout, faults, root_fd, state_fd)
            if state_fd is not None and write:
                lock_fd = os.open(LOCK, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC,
                                  0o600, dir_fd=state_fd)  # fmt: skip
                fcntl.flock(lock_fd, fcntl.LOCK_EX)
            if state_fd is not None:
                store._load()
            yield store
        finally:
            if lock_fd is not None:
                os.close(lock_fd)
            if state_fd is not None:
                os.close(state_fd)
            os.close(state_base)
            os.close(root_fd)

    def _manifest_shown(self) -> str:
        base = self.layout.state_root or self.layout.root
        return os.path.join(base, self.layout.state_rel, MANIFEST)

    def _load(self) -> None:
        """Read the manifest back as hostile input: size, syntax, depth and every rule."""
        assert self.state_fd is not None
        shown = self._manifest_shown()
        raw = read_regular(self.state_fd, MANIFEST, shown, MAX_MANIFEST_BYTES)
        if raw is None:
            return
        try:
            data = json.loads(raw)
            self.manifest = check_manifest(data, self.layout.folders, os.geteuid())
        except (ValueError, RecursionError) as exc:
            why = "nested too deeply" if isinstance(exc, RecursionError) else "not valid JSON"
            raise Refused(f"the manifest {shown} is {why}; nothing was changed") from None
        except Refused as exc:
            raise Refused(
                f"the manifest {shown} is not one the helper wrote ({exc}); nothing was changed"
            ) from None

    @property
    def groups(self) -> dict[str, Any]:
        groups: dict[str, Any] = self.manifest["groups"]
        return groups

    def _save(self) -> None:
        assert self.state_fd is not None
        write_atomic(self.state_fd, MANIFEST, self._manifest_bytes(), 0o644, "the manifest",
                     self.faults)  # fmt: skip

    def _manifest_bytes(self) -> bytes:
        return (json.dumps(self.manifest, indent=2, sort_keys=True) + "\n").encode()

    # ---------------------------------------------------------------- housekeeping

    def _backup_dir(self, create: bool) -> int | None:
        assert self.state_fd is not None
        return walk(self.state_fd, BACKUPS, create=create, mode=0o700)

    def sweep(self) -> None:
        """Drop temp files and backups no group refers to (left by an interrupted run)."""
        assert self.state_fd is not None
        sweep_temp_files(self.state_fd)
        fd = self._backup_dir(create=False)
        if fd is None:
            return
        try:
            wanted = {f["backup"] for g in self.groups.values() for f in g["files"] if f["backup"]}
            for entry in os.listdir(fd):
                st = entry_stat(fd, entry)
                if st is not None and stat.S_ISREG(st.st_mode) and entry not in wanted:
                    os.unlink(entry, dir_fd=fd)
        finally:
            os.close(fd)

    def _finish(self) -> None:
        """Remove created folders that are empty; with no group left, the state folder too."""
        kept = []
        for rel in sorted(self.manifest["created_dirs"], key=lambda d: -d.count("/")):
            remove_empty_dir(self.root_fd, rel)
            with opened_dir(self.root_fd, rel) as fd:
                if fd is not None:
                    kept.append(rel)
        if kept != self.manifest["created_dirs"]:
            self.manifest["created_dirs"] = sorted(kept)
            self._save()
        if self.groups or kept:
            return
        assert self.state_fd is not None
        unlink_file(self.state_fd, MANIFEST, "the manifest", self.faults)
        self.sweep()
        fd = self._backup_dir(create=False)
        if fd is not None:
            os.close(fd)
            os.rmdir(BACKUPS, dir_fd=self.state_fd)
        with suppress(FileNotFoundError):
            os.unlink(LOCK, dir_fd=self.state_fd)
        if self.layout.state_rel:
            base = open_root(self.layout.state_root) if self.layout.state_root else None
            try:
                remove_empty_dir(base if base is not None else self.root_fd, self.layout.state_rel)
            finally:
                if base is not None:
                    os.close(base)

    # ---------------------------------------------------------------- reading files

    def _current(self, path: str) -> tuple[bytes | None, os.stat_result | None]:
        rel_dir, name = _split(path)
        with opened_dir(self.root_fd, rel_dir) as fd:
            if fd is None:
                return None, None
            st = check_regular_or_absent(fd, name, path)
            return read_regular(fd, name, path, MAX_FILE_BYTES), st

    def _missing_dirs(self, rel_dir: str) -> list[str]:
        parts = components(rel_dir)
        missing = []
        for i in range(1, len(parts) + 1):
            prefix = "/".join(parts[:i])
            with opened_dir(self.root_fd, prefix) as fd:
                if fd is None:
                    missing.append(prefix)
        return missing

    def _save_backup(self, data: bytes) -> str:
        name = sha256(data)  # hash-named: checked against its content before every restore
        fd = self._backup_dir(create=True)
        assert fd is not None
        try:
            write_atomic(fd, name, data, 0o600, f"backup {name}", self.faults)
        finally:
            os.close(fd)
        return name

    def _read_backup(self, name: str) -> bytes:
        """A backup's bytes, refused unless they hash to its name."""
        fd = self._backup_dir(create=False)
        data = read_regular(fd, name, f"backup {name}", MAX_FILE_BYTES) if fd is not None else None
        if fd is not None:
            os.close(fd)
        if data is None:
            raise Refused(f"the backup {name} recorded in the manifest is missing")
        prefix = backup_digest_prefix(name)
        if prefix is None or not sha256(data).startswith(prefix):
            raise Refused(f"the backup {name} does not match its hash; nothing was changed")
        return data

    # ---------------------------------------------------------------- install / revert

    def install(self, key: str, files: Sequence[FileSpec]) -> list[Change]:
        """Install ``files`` as group ``key`` (replacing that group's earlier files).

        On a failure (a full disk, a link swapped in) the files and the manifest are put back
        as they were, and the error is raised; if putting back fails too, RollbackIncomplete.
        """
        progress = _Progress()
        try:
            return self._install(key, files, progress)
        except (OSError, Refused) as exc:
            try:
                self._roll_back(key, progress)
            except (OSError, Refused) as rollback:
                raise RollbackIncomplete(exc, rollback) from exc
            raise

    def _roll_back(self, key: str, progress: _Progress) -> None:
        """Undo a failed ``_install`` as far as it got."""
        if progress.committed:
            self.revert(key)  # some targets were replaced: restore them from the backups
            return
        assert self.state_fd is not None
        if progress.recorded:
            if progress.undo is not None:  # the manifest as it was, by a rename: no space needed
                os.rename(progress.undo, MANIFEST, src_dir_fd=self.state_fd,
                          dst_dir_fd=self.state_fd)  # fmt: skip
            else:
                unlink_file(self.state_fd, MANIFEST, "the manifest", self.faults)
        for rel in sorted(progress.new_dirs, key=lambda d: -d.count("/")):
            remove_empty_dir(self.root_fd, rel)
        self.manifest = _empty_manifest()
        self._load()
        self.sweep()
        self._finish()

    def _install(self, key: str, files: Sequence[FileSpec], progress: _Progress) -> list[Change]:
        self.sweep()
        old = self.groups.get(key)
        if old is not None and [f["path"] for f in old["files"]] != [f.path for f in files]:
            self.revert(key)
            old = None
        previous = {f["path"]: f for f in old["files"]} if old else {}
        entries: list[dict[str, Any]] = []
        changes: list[Change] = []
        new_dirs: list[str] = []
        for spec in files:
            rel_dir, _name = _split(spec.path)
            for d in self._missing_dirs(rel_dir):
                if d not in new_dirs:
                    new_dirs.append(d)
            with opened_dir(self.root_fd, rel_dir) as fd:
                if fd is not None:
                    sweep_temp_files(fd)
            current, st = self._current(spec.path)
            entry: dict[str, Any] = {
                "path": spec.path,
                "sha256": sha256(spec.data),
                "size": len(spec.data),
                "mode": spec.mode,
                "backup": None,
                "backup_mode": None,
                "backup_owner": None,
                "replaces_sha256": None,
            }
            if spec.path in previous:
                prev = previous[spec.path]
                for k in ("backup", "backup_mode", "backup_owner"):
                    entry[k] = prev[k]
                entry["replaces_sha256"] = prev["sha256"]
            elif current is not None and st is not None:
                entry["backup"] = self._save_backup(current)
                # It comes back without group/other write or set-id bits, owned by the helper's
                # own user (root) with its group: the rules the manifest is read back with.
                entry["backup_mode"] = stat.S_IMODE(st.st_mode) & RESTORED_MODE_BITS
                entry["backup_owner"] = [os.geteuid(), st.st_gid]
            entries.append(entry)
            if current is None:
                changes.append(Change(spec.path, "created"))
            elif current == spec.data:
                changes.append(Change(spec.path, "unchanged"))
            else:
                changes.append(Change(spec.path, "replaced"))
        self.faults.point("checked")
        progress.undo = self._stage_undo()
        self.groups[key] = {"installed_at": _now(), "files": entries}
        created = self.manifest["created_dirs"]
        created.extend(d for d in new_dirs if d not in created)
        progress.new_dirs = tuple(new_dirs)
        self._save()
        progress.recorded = True
        fds: list[int] = []
        staged: list[str] = []
        try:
            owner = (0, 0) if os.geteuid() == 0 else None
            for spec in files:  # every byte is written before any target is replaced
                rel_dir, name = _split(spec.path)
                fd = walk(self.root_fd, rel_dir, create=True)
                assert fd is not None
                fds.append(fd)
                staged.append(stage_file(fd, name, spec.data, spec.mode, self.faults, owner))
            for fd, spec in zip(fds, files, strict=True):
                check_regular_or_absent(fd, _split(spec.path)[1], spec.path)
            for fd, tmp, spec in zip(fds, staged, files, strict=True):
                progress.committed = True
                commit_staged(fd, tmp, _split(spec.path)[1], spec.path, self.faults)
        except BaseException:
            if not progress.committed:
                for fd, tmp in zip(fds, staged, strict=False):
                    with suppress(OSError):
                        os.unlink(tmp, dir_fd=fd)
            raise
        finally:
            for fd in fds:
                os.close(fd)
        if progress.undo is not None:
            assert self.state_fd is not None
            with suppress(FileNotFoundError):
                os.unlink(progress.undo, dir_fd=self.state_fd)
        return changes

    def _stage_undo(self) -> str | None:
        """A temp copy of the manifest as it is on disk (None when there is none yet), so a
        failed install puts it back with a rename; swept like any temp file after a crash."""
        assert self.state_fd is not None
        raw = read_regular(self.state_fd, MANIFEST, "the manifest", MAX_MANIFEST_BYTES)
        if raw is None:
            return None
        return stage_file(self.state_fd, MANIFEST, raw, 0o644, self.faults, None)

    def _plan_revert(self, group: dict[str, Any]) -> list[_Step]:
        """Check every file of the group first: refused here, nothing has been touched."""
        steps: list[_Step] = []
        for f in reversed(group["files"]):
            current, _st = self._current(f["path"])
            ours = current is not None and sha256(current) in {f["sha256"], f["replaces_sha256"]}
            if current is not None and ours:
                check_installed(f["path"], current, group, self.layout.system)
            if f["backup"]:
                data = self._read_backup(f["backup"])
                if current == data:
                    steps.append(_Step(f, "unchanged"))
                elif current is not None and not ours:
                    raise Refused(f"{f['path']} was changed after mtpstudio installed it")
                else:
                    steps.append(_Step(f, "restore", data))
            elif current is None:
                steps.append(_Step(f, "unchanged"))
            elif not ours:
                raise Refused(f"{f['path']} was changed after mtpstudio installed it")
            else:
                steps.append(_Step(f, "remove"))
        return steps

    def revert(self, key: str) -> list[Change]:
        """Put back what group ``key`` replaced, remove what it created, forget the group."""
        self.sweep()
        group = self.groups.get(key)
        if group is None:
            self._finish()  # tidy up after a run that stopped once the group was dropped
            raise Refused(f"mtpstudio has not installed {key.replace(':', ' ')}")
        for f in group["files"]:
            with opened_dir(self.root_fd, _split(f["path"])[0]) as fd:
                if fd is not None:
                    sweep_temp_files(fd)
        changes: list[Change] = []
        for step in self._plan_revert(group):
            path = step.entry["path"]
            rel_dir, name = _split(path)
            if step.action == "restore":
                assert step.backup is not None
                saved = step.entry["backup_owner"]
                owner = (int(saved[0]), int(saved[1])) if os.geteuid() == 0 and saved else None
                fd = walk(self.root_fd, rel_dir, create=True)
                assert fd is not None
                try:
                    write_atomic(fd, name, step.backup, step.entry["backup_mode"], path,
                                 self.faults, owner)  # fmt: skip
                finally:
                    os.close(fd)
                changes.append(Change(path, "restored"))
            elif step.action == "remove":
                with opened_dir(self.root_fd, rel_dir) as fd3:
                    assert fd3 is not None
                    unlink_file(fd3, name, path, self.faults)
                changes.append(Change(path, "removed"))
            else:
                changes.append(Change(path, "unchanged"))
        del self.groups[key]
        self._save()
        self.sweep()
        self._finish()
        return changes

    def status(self) -> dict[str, Any]:
        """The groups with each file's path, hash and whether it is still as installed."""
        groups: dict[str, Any] = {}
        for key, group in sorted(self.groups.items()):
            files = []
            for f in group["files"]:
                try:
                    current, _st = self._current(f["path"])
                    state = (
                        "missing"
                        if current is None
                        else "installed"
                        if sha256(current) == f["sha256"]
                        else "changed"
                    )
                except Refused as exc:
                    state = f"refused: {exc}"
                files.append(
                    {
                        "path": self.layout.shown(f["path"]),
                        "sha256": f["sha256"],
                        "state": state,
                        "replaced_a_file": f["backup"] is not None,
                    }
                )
            groups[key] = {"installed_at": group["installed_at"], "files": files}
        return {"root": self.layout.root, "groups": groups}

    def read_state_file(self, name: str) -> bytes | None:
        """A file of the state folder (e.g. the stored measurement), None when absent."""
        if self.state_fd is None:
            return None
        return read_regular(self.state_fd, name, name, MAX_FILE_BYTES)
