#!/usr/bin/env bash
# Install tuneup on a node without network, on top of the site's python.
#
#   bash install-offline.sh                                   # python3, into .venv
#   PYTHON=/opt/torch/.venv/bin/python3 bash install-offline.sh
#   VENV=~/venvs/tuneup WHEELS=~/wheels bash install-offline.sh
#
# $VENV (default .venv) sees the packages of $PYTHON (default python3) whatever it is:
# a system python, a venv (a venv made with --system-site-packages from a venv sees the
# system's packages, not that venv's) or a conda env. A .pth file in $VENV adds that
# python's package folders after $VENV's own, so nothing is written into the site's
# environment. tuneup is installed into $VENV offline (editable, no dependencies: torch,
# numpy, h5py, PyYAML, rich, nvidia-ml-py, setuptools and wheel come from the site), and
# so are the wheels in $WHEELS (default ./wheels) if that folder exists: bring the app's
# there from a machine with network,
#   pip download textual plotext -d wheels --python-version 3.12 --only-binary=:all:
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
VENV="${VENV:-$ROOT/.venv}"
PYTHON="${PYTHON:-python3}"
WHEELS="${WHEELS:-$ROOT/wheels}"

say() { echo "install-offline: $*" >&2; }

if ! command -v "$PYTHON" >/dev/null 2>&1; then
    say "error: no python at '$PYTHON': give the site's with PYTHON=/path/to/python3"
    exit 2
fi
site_version="$("$PYTHON" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
if [ -x "$VENV/bin/python" ]; then
    venv_version="$("$VENV/bin/python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
    if [ "$venv_version" != "$site_version" ]; then
        say "error: $VENV holds Python $venv_version, $PYTHON is $site_version: remove $VENV or set VENV="
        exit 2
    fi
else
    say "making $VENV from $PYTHON (Python $site_version)"
    "$PYTHON" -m venv "$VENV"
fi

# The site python's package folders, then the .pth that shows them to $VENV's python.
folders="$("$PYTHON" -c '
import json, site, sys
folders = list(site.getsitepackages()) if hasattr(site, "getsitepackages") else []
if site.ENABLE_USER_SITE:
    folders.append(site.getusersitepackages())
folders += [p for p in sys.path if p.endswith(("site-packages", "dist-packages"))]
print(json.dumps(list(dict.fromkeys(folders))))
')"
"$VENV/bin/python" - "$folders" "$PYTHON" <<'EOF'
import json, os, sys, sysconfig

own = sysconfig.get_paths()["purelib"]
folders = [f for f in json.loads(sys.argv[1]) if os.path.isdir(f) and os.path.realpath(f) != os.path.realpath(own)]
lines = [f"# written by install-offline.sh: the packages of {sys.argv[2]}"]
# addsitedir (not a bare path) so the site's own .pth files are read too.
lines += [f"import site; site.addsitedir({f!r})" for f in folders]
with open(os.path.join(own, "tuneup-site.pth"), "w", encoding="utf-8") as out:
    out.write("\n".join(lines) + "\n")
print(f"install-offline: {len(folders)} package folder(s) of the site python seen from {sys.prefix}", file=sys.stderr)
EOF

if ! "$VENV/bin/python" -c "import torch" >/dev/null 2>&1; then
    say "warning: torch does not import in $VENV: $PYTHON has no torch (give the site's with PYTHON=)"
fi
say "installing tuneup into $VENV (offline, no dependencies)"
"$VENV/bin/python" -m pip install --quiet --no-index --no-deps --no-build-isolation -e "$ROOT" >&2
if [ -d "$WHEELS" ] && compgen -G "$WHEELS/*.whl" >/dev/null; then
    say "installing the wheels in $WHEELS"
    "$VENV/bin/python" -m pip install --quiet --no-index --no-deps "$WHEELS"/*.whl >&2
fi
"$VENV/bin/python" -c "import tuneup" && say "done: $VENV/bin/tuneup doctor checks the node"
