#!/usr/bin/env bash
# html_report_test.sh ANALYZE HTML_RENDER TRACE DATA_DIR: the HTML report in headless Chromium.
#   1. sigmatrace-analyze TRACE --html: the report as users get it (library found next to the analyzer);
#   2. the same document plus a gray-link finding on its first link and three phases (added with jq: no committed
#      trace has them), rendered by html_render;
#   3. the document rendered without the library: tables and a visible note, no script.
# For 1 and 2: no script error, every chart holds as many points as the document has (the page script writes
# the counts ECharts reports from getOption() into #chart-counts), and a non-empty PNG screenshot.
# Exit 77 (skipped) when chromium is not installed, or when the build has no ECharts (not fetched at configure).
set -euo pipefail
analyze=$1 render=$2 trace=$3 data_dir=$4
browser=$(command -v chromium || command -v chromium-browser || true)
if [[ -z $browser ]]; then
  echo "SKIP: chromium is not installed (Debian package chromium; scripts/dev.sh installs it)"
  exit 77
fi
if [[ ! -f $data_dir/echarts.min.js ]]; then
  echo "SKIP: the build has no ECharts ($data_dir/echarts.min.js: see the configure warning)"
  exit 77
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
# Root needs --no-sandbox; no GPU in CI; a private profile so parallel runs do not share one.
run_browser() {
  timeout 90 "$browser" --headless --no-sandbox --disable-gpu --user-data-dir="$tmp/profile" \
    --enable-logging=stderr --v=0 --virtual-time-budget=10000 "$@"
}

"$analyze" "$trace" --json "$tmp/doc.json" --html "$tmp/cli.html" >/dev/null
grep -q 'id="sigmatrace-data"' "$tmp/cli.html" || fail "the analyzer's report has no chart data (library not found?)"

# A gray-link episode over windows 2..5 of the first link seen, and three phases.
jq '(.timeline.windows) as $w | ($w | map(select(.links | length > 0))) as $lw
    | .findings += [{kind: "gray_link", severity: "warning", summary: "injected by html_report_test.sh",
                     evidence: {link: {src: $lw[0].links[0].src, dst: $lw[0].links[0].dst},
                                start_unix_ns: $lw[2].start_ns, end_unix_ns: $lw[5].end_ns}}]
    | .phases = [range(3) as $i | {start_ns: ($i * 1000000), end_ns: (($i + 1) * 1000000), bytes: (65536 * ($i + 1)),
                                   lower_bound_ns: (250000 * ($i + 1)), efficiency: (0.25 * ($i + 1)),
                                   binding_port: {node: "node0", device: "sfab0"}}]' \
  "$tmp/doc.json" >"$tmp/full.json"
"$render" "$tmp/full.json" "$data_dir" "$tmp/full.html"

check() {  # check NAME DOC.json: counts, errors, screenshot
  local name=$1 doc=$2 html="$tmp/$1.html"
  run_browser --dump-dom "file://$html" >"$tmp/$name.dom" 2>"$tmp/$name.log" || fail "$name: chromium failed (log: $(tail -3 "$tmp/$name.log"))"
  local errors counts expected
  errors=$(sed -n 's|.*<pre id="page-errors" hidden="">\([^<]*\)</pre>.*|\1|p' "$tmp/$name.dom")
  [[ -z $errors ]] || fail "$name: script errors in the page: $errors"
  if grep -E 'Uncaught|:CONSOLE\(.*(Error|error)' "$tmp/$name.log"; then fail "$name: console error"; fi
  counts=$(sed -n 's|.*<pre id="chart-counts" hidden="">\([^<]*\)</pre>.*|\1|p' "$tmp/$name.dom")
  [[ -n $counts ]] || fail "$name: the page script did not finish (no #chart-counts)"
  counts=$(jq -cS . <<<"$counts")
  # The timeline charts: one point per window for every link (receiver) active in any window.
  expected=$(jq -cS '(.timeline.windows | length) as $n | {
      throughput: ($n * ([.timeline.windows[].links[] | [.src, .dst]] | unique | length)),
      gray_areas: ([.findings[] | select(.kind == "gray_link")] | length),
      incast: ($n * ([.timeline.windows[].receivers[].receiver] | unique | length)),
      outstanding: (2 * ([.qps[] | select(.outstanding)] | length)),
      outstanding_time: ($n * ([([.timeline.windows[].qps[] | select(has("max_bytes")) | [.node, .pid, .qp_num]] | unique | length), 16] | min)),
      matrix: (.traffic.node_matrix | length),
      latency: ([.ops.by_opcode[].latency_histogram | length] | add),
      rails: (2 * (.rails | length)),
      spread: (.barriers.epoch_samples | length)}
      + (if (.phases | length) > 0 then {phases: (.phases | length)} else {} end)' "$doc")
  [[ $counts == "$expected" ]] || fail "$name: chart points $counts, document $expected"
  (( $(jq .throughput <<<"$counts") > 0 && $(jq .incast <<<"$counts") > 0 )) || fail "$name: empty timeline charts"
  run_browser --screenshot="$tmp/$name.png" --window-size=1200,3000 "file://$html" >/dev/null 2>&1 || fail "$name: no screenshot"
  [[ $(head -c 8 "$tmp/$name.png" | od -An -tx1 | tr -d ' \n') == 89504e470d0a1a0a ]] || fail "$name: screenshot is not a PNG"
  (( $(stat -c %s "$tmp/$name.png") > 20000 )) || fail "$name: screenshot is nearly empty"
  echo "$name: charts $counts, screenshot $(stat -c %s "$tmp/$name.png") bytes"
}
check cli "$tmp/doc.json"
check full "$tmp/full.json"
# The committed trace has barrier-delimited phases; without phases[] the page says so instead of a chart.
jq 'del(.phases)' "$tmp/doc.json" >"$tmp/nophases.json"
"$render" "$tmp/nophases.json" "$data_dir" "$tmp/nophases.html"
grep -q '>no phases in this analysis<' "$tmp/nophases.html" || fail "nophases: no 'no phases' note"
if (( $(jq '.phases | length' "$tmp/doc.json") > 0 )); then
  ! grep -q '>no phases in this analysis<' "$tmp/cli.html" || fail "cli: a 'no phases' note although the document has phases"
fi

"$render" "$tmp/doc.json" --no-library "$tmp/plain.html"
grep -q 'Charts are not shown' "$tmp/plain.html" || fail "plain: no note about the missing library"
grep -q '<script' "$tmp/plain.html" && fail "plain: a script without the library"
grep -q 'RDMA_WRITE' "$tmp/plain.html" || fail "plain: tables missing"
[[ -n ${SIGMATRACE_KEEP_HTML:-} ]] && cp "$tmp"/*.html "$tmp"/*.png "$SIGMATRACE_KEEP_HTML"/
echo "PASS"
