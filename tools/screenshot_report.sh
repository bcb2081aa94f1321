#!/usr/bin/env bash
# Renders an eval report.html in headless Chromium to a PNG, to check what a browser shows.
# Usage: tools/screenshot_report.sh REPORT.html OUT.png [WIDTH [HEIGHT]]   (default 1280x2000)
# A sample report: KERNELLLM_SAMPLE_REPORT_DIR=/tmp/sample build/<dir>/tests/eval_report_test \
#   --gtest_filter=SampleReport.*  then  tools/screenshot_report.sh /tmp/sample/report.html /tmp/report.png
set -euo pipefail

if [[ $# -lt 2 ]]; then
  echo "usage: $0 REPORT.html OUT.png [WIDTH [HEIGHT]]" >&2
  exit 2
fi
report=$(realpath "$1")
out=$(realpath -m "$2")
width=${3:-1280}
height=${4:-2000}
[[ -f "$report" ]] || { echo "expected a report file, found nothing at $report" >&2; exit 1; }

browser=""
for name in chromium chromium-browser google-chrome; do
  if command -v "$name" >/dev/null 2>&1; then browser=$name; break; fi
done
[[ -n "$browser" ]] || { echo "expected chromium on PATH (apt-get install -y chromium), found none" >&2; exit 1; }

# A private profile dir so that a running browser's profile is never touched.
profile=$(mktemp -d)
trap 'rm -rf "$profile"' EXIT
"$browser" --headless --no-sandbox --disable-gpu --hide-scrollbars --user-data-dir="$profile" \
  --window-size="${width},${height}" --screenshot="$out" "file://$report" >/dev/null 2>&1
[[ -s "$out" ]] || { echo "chromium wrote no screenshot to $out" >&2; exit 1; }
echo "$out"
