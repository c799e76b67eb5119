# Sourced by the reference scripts: `pinned_venv DIR PINS [PIP_ARGS...]` makes DIR a venv holding
# exactly PINS (a space-separated list), rebuilt whenever the pins change (recorded in
# DIR/corral-pins), so that each tool's references come from the versions named here.
pinned_venv() {
  local dir=$1 pins=$2
  shift 2
  if [[ $(cat "$dir/corral-pins" 2>/dev/null) != "$pins" ]]; then
    rm -rf "$dir"
    python3 -m venv "$dir"
    # shellcheck disable=SC2086
    "$dir/bin/pip" install --quiet "$@" $pins
    echo "$pins" >"$dir/corral-pins"
  fi
}
