# Sourced by bin/serve and bin/test: create .venv and install the pinned requirements when they change.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
# .env: export KEY=value lines the real environment does not already set (the settings read .env too).
if [ -f .env ]; then
  while IFS='=' read -r key value; do
    [[ "$key" =~ ^[A-Z_][A-Z0-9_]*$ ]] || continue
    [ -n "${!key+x}" ] || export "$key=$value"
  done < .env
fi
PYTHON="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  echo "==> creating .venv with $($PYTHON --version)" >&2
  "$PYTHON" -m venv .venv
fi
stamp=".venv/.installed-$(cat requirements.txt pyproject.toml | sha256sum | cut -c1-16)"
if [ ! -f "$stamp" ]; then
  echo "==> installing requirements (first run or requirements changed)" >&2
  .venv/bin/python -m pip install --quiet --upgrade pip
  .venv/bin/python -m pip install --quiet -r requirements.txt
  .venv/bin/python -m pip install --quiet --no-deps -e .
  rm -f .venv/.installed-*
  touch "$stamp"
fi
export PATH="$ROOT/.venv/bin:$PATH"
