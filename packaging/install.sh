#!/usr/bin/env bash
# System-wide install of mtpstudio for distributions without a package (Arch: packaging/PKGBUILD).
#
#   sudo packaging/install.sh               install (or upgrade) from this source tree
#   sudo packaging/install.sh --uninstall   remove everything the install wrote
#   packaging/install.sh --check-polkit     only say whether pkexec (polkit) is there
#
# Options: --prefix DIR (default /usr/local), --wheel FILE (install this wheel instead of building
# one from the source tree). DESTDIR=/some/dir stages the whole tree below that folder instead of
# / (no root needed). PYTHON names the interpreter (default python3, 3.11 or newer).
#
# What goes where (PREFIX=/usr/local):
#   PREFIX/lib/mtpstudio/venv/                     the app and its Python dependencies (a venv)
#   PREFIX/bin/mtpstudio                           link to the venv's entry point
#   /usr/lib/mtpstudio/mtpstudio-helper            the privileged helper's launcher (root, 0755)
#   /usr/share/polkit-1/actions/io.github.mtpstudio.helper.policy
#   PREFIX/share/applications/io.github.mtpstudio.desktop
#   PREFIX/share/metainfo/io.github.mtpstudio.metainfo.xml
#   PREFIX/share/icons/hicolor/{scalable,NxN}/apps/io.github.mtpstudio.{svg,png}
# The helper and the policy are outside PREFIX on purpose: polkit reads policies only from
# /usr/share/polkit-1/actions, and the policy's exec.path names the helper's fixed path.
# Sessions, wrappers and units that `mtpstudio apply` wrote are not touched by --uninstall:
# run `mtpstudio revert` for them first. The helper runs through pkexec: when it is missing, the
# install says which package provides it here (PKEXEC and OS_RELEASE name others, for tests).
set -eu

ID=io.github.mtpstudio
HELPER=/usr/lib/mtpstudio/mtpstudio-helper
POLICY_DIR=/usr/share/polkit-1/actions
POLICY_NAME=$ID.helper.policy
ICON_SIZES="16 22 24 32 48 64 128 256 512"
STATE_DIR=/var/lib/mtpstudio

PREFIX=/usr/local
WHEEL=
ACTION=install
DESTDIR=${DESTDIR:-}
PYTHON=${PYTHON:-python3}
SRC=$(cd "$(dirname "$0")/.." && pwd)

die() {
  printf 'install.sh: %s\n' "$1" >&2
  [ $# -lt 2 ] || printf '  %s\n' "$2" >&2
  exit 2
}

while [ $# -gt 0 ]; do
  case $1 in
    --uninstall) ACTION=uninstall ;;
    --check-polkit) ACTION=check-polkit ;;
    --prefix) [ $# -ge 2 ] || die "--prefix needs a folder"; PREFIX=$2; shift ;;
    --prefix=*) PREFIX=${1#--prefix=} ;;
    --wheel) [ $# -ge 2 ] || die "--wheel needs a file"; WHEEL=$2; shift ;;
    --wheel=*) WHEEL=${1#--wheel=} ;;
    -h|--help) sed -n '2,/^set -eu/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument: $1" "Run packaging/install.sh --help for the options." ;;
  esac
  shift
done

case $PREFIX in
  /*) PREFIX=${PREFIX%/} ;;
  *) die "--prefix must be an absolute folder, not '$PREFIX'" ;;
esac
DESTDIR=${DESTDIR%/}
APPDIR=$PREFIX/lib/mtpstudio
VENV=$APPDIR/venv
BIN=$PREFIX/bin/mtpstudio
DESKTOP=$PREFIX/share/applications/$ID.desktop
METAINFO=$PREFIX/share/metainfo/$ID.metainfo.xml
ICONS=$PREFIX/share/icons/hicolor

# The package that provides pkexec here (mtpstudio/core/distro.py says the same).
pkexec_package() {
  release=${OS_RELEASE:-/etc/os-release}
  os_value() { [ -r "$release" ] && sed -n "s/^$1=//p" "$release" | head -n 1 | tr -d "\"'"; }
  id=$(os_value ID); like=$(os_value ID_LIKE)
  version=$(os_value VERSION_ID); ubuntu=$(os_value UBUNTU_VERSION_ID)
  major=${version%%.*}
  case " $id $like " in
    *" ubuntu "*)
      [ "$id" = ubuntu ] || { version=$ubuntu; major=${ubuntu%%.*}; }
      minor=${version#*.}; minor=${minor%%.*}
      if [ -n "$major" ] && { [ "$major" -lt 23 ] ||
          { [ "$major" -eq 23 ] && [ "${minor:-0}" -lt 4 ]; }; }; then
        echo "policykit-1|sudo apt install policykit-1"
      else
        echo "pkexec|sudo apt install pkexec"
      fi ;;
    *" debian "*)
      if [ "$id" = debian ] && [ -n "$major" ] && [ "$major" -lt 12 ]; then
        echo "policykit-1|sudo apt install policykit-1"
      else
        echo "pkexec|sudo apt install pkexec"
      fi ;;
    *" arch "*|*" archlinux "*|*" cachyos "*|*" manjaro "*|*" endeavouros "*)
      echo "polkit|sudo pacman -S polkit" ;;
    *" fedora "*|*" rhel "*|*" centos "*) echo "polkit|sudo dnf install polkit" ;;
    *" opensuse"*|*" suse "*|*" sles "*) echo "polkit|sudo zypper install polkit" ;;
    *) echo "polkit|install polkit (the package that provides pkexec)" ;;
  esac
}

check_polkit() {
  if command -v "${PKEXEC:-pkexec}" >/dev/null 2>&1; then return 0; fi
  [ -n "${PKEXEC:-}" ] || [ ! -x /usr/bin/pkexec ] || return 0
  found=$(pkexec_package)
  printf "install.sh: warning: pkexec (polkit) is not installed, and mtpstudio's helper runs through it:\n" >&2
  printf '  without it no session, unit or profile can be installed. Install the package %s: %s\n' \
    "${found%%|*}" "${found#*|}" >&2
}

if [ "$ACTION" = check-polkit ]; then
  check_polkit
  exit 0
fi

if [ -z "$DESTDIR" ] && [ "$(id -u)" -ne 0 ]; then
  die "a system-wide install needs root" "Run it with sudo, or set DESTDIR=/some/dir to stage it."
fi

# Every file the install writes (below DESTDIR), one a line; the venv is removed as a whole.
installed_files() {
  printf '%s\n' "$BIN" "$HELPER" "$POLICY_DIR/$POLICY_NAME" "$DESKTOP" "$METAINFO" \
    "$ICONS/scalable/apps/$ID.svg"
  for size in $ICON_SIZES; do
    printf '%s\n' "$ICONS/${size}x$size/apps/$ID.png"
  done
}

refresh_caches() {
  [ -z "$DESTDIR" ] || return 0
  if command -v gtk-update-icon-cache >/dev/null 2>&1; then
    gtk-update-icon-cache -q -t -f "$ICONS" || true
  fi
  if command -v update-desktop-database >/dev/null 2>&1; then
    update-desktop-database -q "$PREFIX/share/applications" || true
  fi
}

uninstall() {
  if [ -d "$DESTDIR$STATE_DIR" ] && [ -n "$(ls -A "$DESTDIR$STATE_DIR" 2>/dev/null)" ]; then
    printf "install.sh: note: %s records what 'mtpstudio apply' installed (sessions, units);\n" \
      "$STATE_DIR" >&2
    printf "  those files stay. To remove them, reinstall and run 'mtpstudio revert'.\n" >&2
  fi
  rm -rf "$DESTDIR$VENV"
  installed_files | while IFS= read -r path; do
    if [ -e "$DESTDIR$path" ] || [ -L "$DESTDIR$path" ]; then
      rm -f "$DESTDIR$path"
      printf 'removed %s\n' "$path"
    fi
  done
  # The app's own folders, when nothing else (say, session wrappers) is left in them.
  rmdir "$DESTDIR$APPDIR" 2>/dev/null || true
  rmdir "$DESTDIR$(dirname "$HELPER")" 2>/dev/null || true
  refresh_caches
  printf 'mtpstudio is uninstalled.\n'
}

check_python() {
  command -v "$PYTHON" >/dev/null 2>&1 || die "no $PYTHON found" "Install Python 3.11 or newer."
  "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))' \
    || die "$PYTHON is older than 3.11" "Set PYTHON to a Python 3.11 or newer."
  "$PYTHON" -c 'import venv, ensurepip' 2>/dev/null \
    || die "$PYTHON cannot create a venv" "On Debian or Ubuntu: apt install python3-venv."
}

# The venv's scripts name their own path; when staged below DESTDIR, make them name the final one.
relocate_venv() {
  [ -n "$DESTDIR" ] || return 0
  grep -rlI -F "$DESTDIR$VENV" "$DESTDIR$VENV/bin" "$DESTDIR$VENV/pyvenv.cfg" | while IFS= read -r f; do
    sed -i "s|$DESTDIR$VENV|$VENV|g" "$f"
  done
}

install_app() {
  check_python
  workdir=$(mktemp -d)
  trap 'rm -rf "$workdir"' EXIT
  if [ -z "$WHEEL" ]; then
    [ -f "$SRC/pyproject.toml" ] || die "no source tree at $SRC" "Pass --wheel FILE."
    printf 'building the wheel from %s\n' "$SRC"
    "$PYTHON" -m pip wheel -q --no-deps --wheel-dir "$workdir" "$SRC" >/dev/null \
      || die "could not build the wheel" "Check that $PYTHON has pip (python3-pip)."
    WHEEL=$(ls "$workdir"/mtpstudio-*.whl)
  fi
  [ -f "$WHEEL" ] || die "no wheel at $WHEEL"

  printf 'creating the venv %s\n' "$VENV"
  rm -rf "$DESTDIR$VENV"
  mkdir -p "$DESTDIR$APPDIR"
  "$PYTHON" -m venv "$DESTDIR$VENV"
  "$DESTDIR$VENV/bin/python" -m pip install -q --disable-pip-version-check --no-compile "$WHEEL" \
    || die "could not install the wheel and its dependencies into the venv" \
      "Check the network (PyPI) and run install.sh again."
  relocate_venv
  # Compile now (root-owned files: users cannot write bytecode later), naming final paths.
  # Best effort, as pip does: a few template files in PySide6 are not Python. Bytecode that
  # venv creation compiled below DESTDIR is dropped first.
  if [ -n "$DESTDIR" ]; then
    find "$DESTDIR$VENV/lib" -type d -name __pycache__ -prune -exec rm -rf {} +
  fi
  "$DESTDIR$VENV/bin/python" -m compileall -q -j 0 -s "$DESTDIR/" -p / "$DESTDIR$VENV/lib" \
    >/dev/null 2>&1 || true

  mkdir -p "$DESTDIR$(dirname "$BIN")"
  ln -sfn "$VENV/bin/mtpstudio" "$DESTDIR$BIN"

  # The helper launcher: packaging/mtpstudio-helper with the venv's interpreter (isolated mode).
  mkdir -p "$DESTDIR$(dirname "$HELPER")"
  { printf '#!%s -I\n' "$VENV/bin/python3"; tail -n +2 "$SRC/packaging/mtpstudio-helper"; } \
    >"$workdir/helper"
  install -m 0755 "$workdir/helper" "$DESTDIR$HELPER"
  install -D -m 0644 "$SRC/packaging/$POLICY_NAME" "$DESTDIR$POLICY_DIR/$POLICY_NAME"

  # The launcher names the entry point by its full path (PREFIX/bin may not be on PATH).
  sed -e "s|^Exec=mtpstudio |Exec=$BIN |" -e "s|^TryExec=mtpstudio\$|TryExec=$BIN|" \
    "$SRC/resources/$ID.desktop" >"$workdir/desktop"
  install -D -m 0644 "$workdir/desktop" "$DESTDIR$DESKTOP"
  install -D -m 0644 "$SRC/resources/$ID.metainfo.xml" "$DESTDIR$METAINFO"
  install -D -m 0644 "$SRC/resources/icons/mtpstudio.svg" "$DESTDIR$ICONS/scalable/apps/$ID.svg"
  for size in $ICON_SIZES; do
    install -D -m 0644 "$SRC/resources/icons/png/mtpstudio-$size.png" \
      "$DESTDIR$ICONS/${size}x$size/apps/$ID.png"
  done
  refresh_caches

  printf 'installed mtpstudio:\n  %s/ (the app in a venv)\n' "$VENV"
  installed_files | sed 's/^/  /'
  check_polkit
}

case $ACTION in
  install) install_app ;;
  uninstall) uninstall ;;
esac
