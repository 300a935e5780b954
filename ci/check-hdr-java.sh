#!/usr/bin/env bash
# Checks that HdrHistogram's own Java tools read boomkv's interval logs (.hlog).
#
# Writes a sample log with `cargo run --example hlog_sample`, runs
# org.HdrHistogram.HistogramLogProcessor on it with no flags but -i (as a user
# would first), then on the untagged total and every tag, and compares the
# total count, max, median and 99th percentile the Java tool reports with what the
# Rust side computed from the same histograms. Fails on any error or mismatch.
#
# Needs a JRE and HdrHistogram's jar:
#   apt-get install -y --no-install-recommends default-jre-headless libhdrhistogram-java
# Debian's package installs the jar as /usr/share/java/hdrhistogram.jar; set
# HDRHISTOGRAM_JAR to use another one.
set -euo pipefail

cd "$(dirname "$0")/.."

find_jar() {
    if [[ -n "${HDRHISTOGRAM_JAR:-}" ]]; then
        echo "$HDRHISTOGRAM_JAR"
    elif command -v dpkg >/dev/null && dpkg -L libhdrhistogram-java >/dev/null 2>&1; then
        dpkg -L libhdrhistogram-java | grep -E '/usr/share/java/hdrhistogram\.jar$' | head -n1
    else
        echo /usr/share/java/hdrhistogram.jar
    fi
}

jar="$(find_jar)"
if [[ ! -f "$jar" ]]; then
    echo "check-hdr-java: HdrHistogram jar not found (install libhdrhistogram-java or set HDRHISTOGRAM_JAR)" >&2
    exit 1
fi
if ! command -v java >/dev/null; then
    echo "check-hdr-java: no java on PATH (install default-jre-headless)" >&2
    exit 1
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

cargo run --quiet --example hlog_sample -- "$work/sample.hlog" >"$work/expected.txt"
if [[ ! -s "$work/expected.txt" ]]; then
    echo "check-hdr-java: hlog_sample printed no tags" >&2
    exit 1
fi

failures=0
# No flags but -i: the Java tool reads the untagged lines and must not fail.
if ! java -cp "$jar" org.HdrHistogram.HistogramLogProcessor -i "$work/sample.hlog" \
    >"$work/plain.stdout" 2>"$work/plain.stderr" || grep -qiE 'exception|error' "$work/plain.stderr"; then
    echo "FAIL HistogramLogProcessor -i sample.hlog (no other flags):" >&2
    cat "$work/plain.stderr" >&2
    failures=$((failures + 1))
else
    want_total=$(awk '/^tag=UNTAGGED /{for(i=1;i<=NF;i++) if ($i ~ /^count=/) print substr($i,7)}' "$work/expected.txt")
    # Without -o the percentile distribution goes to stdout, ending with
    # "#[Max     =        0.220, Total count    =       100000]" (milliseconds).
    got_total=$(grep -E '^#\[Max' "$work/plain.stdout" | sed -E 's/.*Total count *= *([0-9]+)\].*/\1/' || true)
    if [[ "$got_total" != "$want_total" ]]; then
        echo "FAIL no-flag run: total count $got_total in Java, $want_total in Rust" >&2
        failures=$((failures + 1))
    else
        echo "ok   HistogramLogProcessor -i sample.hlog (no flags): total count $got_total"
    fi
fi
while read -r line; do
    # tag=READ count=89987 max_ns=220415 p50_ns=12079 p99_ns=21999
    declare -A want=()
    for kv in $line; do
        want[${kv%%=*}]=${kv#*=}
    done
    tag=${want[tag]}
    out="$work/out-$tag"
    tag_args=(-tag "$tag")
    if [[ $tag == UNTAGGED ]]; then
        tag_args=()
    fi
    if ! java -cp "$jar" org.HdrHistogram.HistogramLogProcessor \
        -i "$work/sample.hlog" "${tag_args[@]}" -o "$out" -outputValueUnitRatio 1 \
        >"$out.stdout" 2>"$out.stderr"; then
        echo "FAIL $tag: HistogramLogProcessor exited with an error:" >&2
        cat "$out.stderr" >&2
        failures=$((failures + 1))
        continue
    fi
    if grep -qiE 'exception|error' "$out.stderr"; then
        echo "FAIL $tag: HistogramLogProcessor reported:" >&2
        cat "$out.stderr" >&2
        failures=$((failures + 1))
        continue
    fi
    # "#[Max     =   220415.000, Total count    =        89987]"
    summary=$(grep -E '^#\[Max' "$out.hgrm" || true)
    got_max=$(sed -E 's/^#\[Max *= *([0-9]+)\.[0-9]+,.*/\1/' <<<"$summary")
    got_count=$(sed -E 's/.*Total count *= *([0-9]+)\].*/\1/' <<<"$summary")
    # Last interval line: "5.000: I:... ( ... ) T:89987 ( 50% 90% 99% 99.9% 99.99% Max )"
    totals=$(grep -E '^[0-9.]+: I:' "$out" | tail -n1 | sed -E 's/.*T:[0-9]+ \( ([^)]*) \).*/\1/')
    read -r got_p50 _p90 got_p99 _rest <<<"$totals"
    got_p50=${got_p50%.*}
    got_p99=${got_p99%.*}
    status=ok
    for field in "count:$got_count:${want[count]}" "max:$got_max:${want[max_ns]}" \
        "p50:$got_p50:${want[p50_ns]}" "p99:$got_p99:${want[p99_ns]}"; do
        IFS=: read -r name got expected <<<"$field"
        if [[ "$got" != "$expected" ]]; then
            echo "FAIL $tag: $name is $got in Java, $expected in Rust" >&2
            status=mismatch
        fi
    done
    if [[ $status == ok ]]; then
        echo "ok   $tag: count=$got_count max=${got_max}ns p50=${got_p50}ns p99=${got_p99}ns (HistogramLogProcessor agrees)"
    else
        failures=$((failures + 1))
    fi
    unset want
done <"$work/expected.txt"

if ((failures > 0)); then
    echo "check-hdr-java: $failures tag(s) failed" >&2
    exit 1
fi
version=$(dpkg-query -W -f '${Version}' libhdrhistogram-java 2>/dev/null || echo unknown)
echo "check-hdr-java: HistogramLogProcessor ($jar, libhdrhistogram-java $version) read every tag of the boomkv log"
