# kill_tree PID: SIGKILL to PID and every process under it, children first (a session daemon and its consumer
# daemons). Sourced by scripts/with-private-lttng.sh and tests/support/sandbox.sh. Read from /proc, not with
# pgrep: under a sanitizer build's LD_PRELOAD pgrep was seen to hang.
kill_tree() {
  local target=$1 p line state ppid
  for p in /proc/[0-9]*; do
    read -r line 2>/dev/null <"$p/stat" || continue
    read -r state ppid _ <<<"${line##*) }"   # pid (comm) state ppid ...; comm may hold ") "
    [[ $ppid == "$target" ]] && kill_tree "${p#/proc/}"
  done
  kill -KILL "$target" 2>/dev/null || true
}
