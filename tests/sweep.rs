//! `boomctl sweep` end to end on a tiny grid: CSV rows per grid point, figures with
//! their texts, `--plot-only`, `--resume`, and errors that name the file.

use std::path::Path;
use std::process::{Command, Output};

use boomkv::bench::sweep::plot::svg_texts;
use boomkv::bench::sweep::presets::latency::PRESET as LATENCY;
use boomkv::bench::sweep::{grid, SweepOptions, Table};

fn boomctl() -> Command {
    Command::new(env!("CARGO_BIN_EXE_boomctl"))
}

fn ok(out: Output) -> String {
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "stdout:\n{stdout}\nstderr:\n{}", String::from_utf8_lossy(&out.stderr));
    stdout
}

/// The tiny latency grid of these tests: 2 sizes x 3 protocols, few operations.
fn tiny_latency(out: &Path, extra: &[&str]) -> Output {
    boomctl()
        .args([
            "sweep",
            "latency",
            "--quick",
            "--sizes",
            "32,4k",
            "--protocols",
            "boom,rdmp,rpc",
            "--ops",
            "200",
            "--transport",
            "tcp",
            "--quiet",
            "--out",
        ])
        .arg(out)
        .args(extra)
        .output()
        .unwrap()
}

fn svg(dir: &Path, stem: &str) -> Vec<String> {
    let p = dir.join(format!("{stem}.svg"));
    let text = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    svg_texts(&text)
}

fn has(texts: &[String], want: &str) -> bool {
    texts.iter().any(|t| t == want)
}

#[test]
fn latency_sweep_writes_csv_plots_setup_and_resumes() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let stdout = ok(tiny_latency(&out, &[]));
    // The summary: reductions per size, the paper's numbers, the targets.
    assert!(stdout.contains("== latency (figures 13, 14; 6, 7 are their RDMP-KV lines) =="), "{stdout}");
    assert!(stdout.contains("-42% (fig. 13)") && stdout.contains("-41% (fig. 14)"), "{stdout}");
    assert!(stdout.contains("paper: PUT at 32 B at least 42% below RDMP-KV"), "{stdout}");
    assert!(stdout.contains("paper: GET above 1 KiB at least 38% below RDMA-KV (4 KiB)"), "{stdout}");

    // One CSV row per grid point and repeat (--quick: 3), interleaved: every point once,
    // then every point again; every row complete.
    let t = Table::read(&out.join("latency.csv")).unwrap();
    let mut o = SweepOptions::new(vec![LATENCY], out.clone());
    o.quick = true;
    o.axes.sizes = Some(vec![32, 4096]);
    o.axes.set("protocols", "boom,rdmp,rpc").unwrap();
    let points = grid(LATENCY, &o).unwrap();
    let np = points.len();
    assert_eq!(np, 6, "two sizes, three protocols");
    assert_eq!(t.rows.len(), 3 * np);
    for (k, r) in t.rows.iter().enumerate() {
        assert_eq!(r[0], points[k % np].id(), "row {k}");
        assert_eq!(t.str(k, "repeat").unwrap(), (k / np).to_string(), "row {k}");
    }
    assert!(stdout.contains("3 interleaved repeats per point"), "{stdout}");
    assert!(out.join("latency-boom-32.r2.put.hlog").exists());
    for i in 0..t.rows.len() {
        assert_eq!(t.req(i, "put_ops").unwrap(), 200.0);
        assert_eq!(t.req(i, "get_ops").unwrap(), 200.0);
        assert!(t.req(i, "put_avg_us").unwrap() > 0.0 && t.req(i, "get_p99_us").unwrap() > 0.0);
        assert_eq!(t.req(i, "errors").unwrap(), 0.0);
        assert!(out.join(t.str(i, "put_hlog").unwrap()).exists());
        // The machine's speed sample taken before the run (a loop of about a
        // millisecond; a second would mean a broken timer, not a slow machine).
        let speed = t.req(i, "speed_us").unwrap();
        assert!(speed > 0.0 && speed < 1e6, "row {i}: speed_us {speed}");
    }
    // BOOM-KV's saving over RDMP-KV in microseconds is the median of the repeats'
    // differences (it was the first repeat's alone, beside a table of all three).
    let mut diffs: Vec<f64> = (0..t.rows.len())
        .filter(|&i| t.str(i, "point").unwrap() == "rdmp/32")
        .map(|i| {
            let rep = t.str(i, "repeat").unwrap();
            let boom = (0..t.rows.len())
                .find(|&j| t.str(j, "point").unwrap() == "boom/32" && t.str(j, "repeat").unwrap() == rep)
                .unwrap();
            t.req(i, "put_p50_us").unwrap() - t.req(boom, "put_p50_us").unwrap()
        })
        .collect();
    diffs.sort_by(f64::total_cmp);
    assert_eq!(diffs.len(), 3);
    let line = stdout.lines().find(|l| l.contains("32 B PUT: RDMP-KV's median minus BOOM-KV's")).unwrap();
    assert!(line.contains("the median of the 3 repeats' differences"), "{line}");
    let said: f64 = line.split(" is ").nth(1).unwrap().split(' ').next().unwrap().parse().unwrap();
    assert!((said - diffs[1]).abs() < 0.006, "{line}: the repeats' differences are {diffs:?}");
    let c = Table::read(&out.join("latency-compare.csv")).unwrap();
    assert_eq!(c.rows.len(), 2 * 2 * 2, "op x baseline x size");
    // Verdicts only where every repeat lies on one side of the target.
    for i in 0..c.rows.len() {
        assert_eq!(c.req(i, "repeats").unwrap(), 3.0);
        let (lo, med, hi) = (
            c.req(i, "change_p50_lo_pct").unwrap(),
            c.req(i, "change_p50_pct").unwrap(),
            c.req(i, "change_p50_hi_pct").unwrap(),
        );
        assert!(lo <= med && med <= hi, "{lo} {med} {hi}");
        if let Some(target) = c.num(i, "target_pct").unwrap() {
            let verdict = c.str(i, "verdict").unwrap();
            let want = if hi <= target {
                "met"
            } else if lo > target {
                "MISSED"
            } else {
                "inconclusive (noisy)"
            };
            // The CSV rounds to 0.01: an end that equals the target there may have been
            // on either side of it before rounding.
            let at_edge = (hi - target).abs() < 0.01 || (lo - target).abs() < 0.01;
            let next = if (hi - target).abs() < 0.01 {
                ["met", "inconclusive (noisy)"]
            } else {
                ["MISSED", "inconclusive (noisy)"]
            };
            assert!(
                verdict == want || (at_edge && next.contains(&verdict)),
                "row {i}: [{lo}, {hi}] against {target}: {verdict}"
            );
        }
    }

    // SETUP.md: machine, transport, flush, durability, version, commit, command.
    let setup = std::fs::read_to_string(out.join("SETUP.md")).unwrap();
    for want in [
        "- CPU: ",
        "- cores",
        "- memory: ",
        "- kernel: ",
        "- transport: tcp",
        "- flush primitive: ",
        "- durability: ",
        "- boomctl version: ",
        "- git commit: ",
        "- command: `",
        "--sizes 32,4k",
        "## Machine load during the runs",
        "other processes ",
        "CPU speed: a fixed integer loop, timed before each of ",
        "## Spread between repeats",
    ] {
        assert!(setup.contains(want), "{want} not in SETUP.md:\n{setup}");
    }
    assert!(out.join("SUMMARY.md").exists());

    // Figures: PNG and SVG, title, axis labels with units, one legend entry per protocol.
    for stem in ["fig13-put-latency", "fig14-get-latency", "latency-reduction"] {
        assert!(std::fs::metadata(out.join(format!("{stem}.png"))).unwrap().len() > 5000, "{stem}.png");
    }
    let put = svg(&out, "fig13-put-latency");
    assert!(has(&put, "PUT latency vs value size (tcp, 1 client)"), "{put:?}");
    assert!(has(&put, "value size (bytes, log scale)"), "{put:?}");
    assert!(put.iter().any(|t| t.starts_with("median latency (µs), bars: range of 3 repeats")), "{put:?}");
    for l in ["BOOM-KV", "RDMP-KV (two-phase)", "RDMA-KV (RPC)"] {
        assert!(has(&put, l), "{l} not in {put:?}");
    }
    let red = svg(&out, "latency-reduction");
    assert!(red.iter().any(|t| t.starts_with("change of median latency (%)")), "{red:?}");
    assert!(has(&red, "PUT vs RDMP-KV (two-phase)") && has(&red, "paper: PUT vs RDMP-KV (two-phase)"), "{red:?}");

    // A second run without --resume refuses to mix results.
    let again = tiny_latency(&out, &[]);
    assert!(!again.status.success());
    assert!(String::from_utf8_lossy(&again.stderr).contains("--resume"));

    // --resume skips every point already in the CSV.
    let mut csv = std::fs::read_to_string(out.join("latency.csv")).unwrap();
    let before = csv.clone();
    let stdout = ok(tiny_latency(&out, &["--resume"]));
    assert!(stdout.contains("sweep: 0 runs") && stdout.contains("(18 skipped, 0 failed)"), "{stdout}");
    assert_eq!(std::fs::read_to_string(out.join("latency.csv")).unwrap(), before);
    // Nothing ran: SETUP.md still describes the runs there, and only them.
    let kept = std::fs::read_to_string(out.join("SETUP.md")).unwrap();
    assert_eq!(kept, setup, "a resume that ran nothing rewrote SETUP.md");
    // A resume under other run-wide settings is refused before anything runs: the rows
    // there were measured under the first invocation's, and would pass for its own.
    let other = tiny_latency(&out, &["--resume", "--seed", "2"]);
    assert!(!other.status.success());
    let err = String::from_utf8_lossy(&other.stderr);
    assert!(err.contains("seed 1 (now 2)") && err.contains("latency.csv"), "{err}");
    assert_eq!(std::fs::read_to_string(out.join("latency.csv")).unwrap(), before);

    // Drop the last row: --resume runs exactly that point again.
    csv.truncate(csv.trim_end().rfind('\n').unwrap() + 1);
    std::fs::write(out.join("latency.csv"), &csv).unwrap();
    let stdout = ok(tiny_latency(&out, &["--resume"]));
    assert!(stdout.contains("sweep: 1 run in") && stdout.contains("(17 skipped, 0 failed)"), "{stdout}");
    assert_eq!(Table::read(&out.join("latency.csv")).unwrap().rows.len(), 18);
    // A row cut short (a full disk) is no result: --plot-only reads the rows before it,
    // and --resume cuts it and runs its point again. Both refused the file for good
    // ("found record with 9 fields, but the previous record has 55 fields").
    let full = std::fs::read(out.join("latency.csv")).unwrap();
    std::fs::write(out.join("latency.csv"), &full[..full.len() - 20]).unwrap();
    ok(boomctl().arg("sweep").arg("--plot-only").arg(&out).output().unwrap());
    let again = tiny_latency(&out, &["--resume"]);
    let err = String::from_utf8_lossy(&again.stderr).into_owned();
    let stdout = ok(again);
    assert!(stdout.contains("sweep: 1 run in") && stdout.contains("(17 skipped, 0 failed)"), "{stdout}");
    assert!(err.contains("cut a torn last row"), "{err}");
    assert_eq!(Table::read(&out.join("latency.csv")).unwrap().rows.len(), 18);
    assert!(std::fs::read(out.join("latency.csv")).unwrap().ends_with(b"\n"));
    // SETUP.md keeps the first invocation's machine and settings, and adds the resumed
    // one's, with the load during its run; the spread section stays one, at the end.
    let resumed = std::fs::read_to_string(out.join("SETUP.md")).unwrap();
    let first = setup.find("## Spread between repeats").unwrap();
    assert!(resumed.starts_with(&setup[..first]), "the first invocation's part changed:\n{resumed}");
    let at = resumed.find("## Resumed on ").expect("a resumed section");
    let tail = &resumed[at..];
    for want in ["### Machine", "- CPU: ", "### Settings", "--resume`", "## Machine load during the resumed runs"] {
        assert!(tail.contains(want), "{want} not in the resumed section:\n{tail}");
    }
    assert_eq!(resumed.matches("## Spread between repeats").count(), 1, "{resumed}");
    assert!(resumed.rfind("## Spread between repeats").unwrap() > at, "{resumed}");

    // --plot-only re-renders from the CSV alone.
    for stem in ["fig13-put-latency", "fig14-get-latency", "latency-reduction"] {
        std::fs::remove_file(out.join(format!("{stem}.svg"))).unwrap();
        std::fs::remove_file(out.join(format!("{stem}.png"))).unwrap();
    }
    std::fs::remove_file(out.join("SUMMARY.md")).unwrap();
    let stdout = ok(boomctl().args(["sweep", "--plot-only"]).arg(&out).output().unwrap());
    assert!(stdout.contains("== latency"), "{stdout}");
    // It draws what the CSV holds, where it is: a run's options would be ignored.
    for extra in [&["--out", "elsewhere"][..], &["--sizes", "32"], &["--transport", "shm"], &["--repeats", "2"]] {
        let o = boomctl().args(["sweep", "--plot-only"]).arg(&out).args(extra).output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success() && err.contains("cannot be used with"), "{extra:?}: {err}");
    }
    assert!(has(&svg(&out, "fig14-get-latency"), "GET latency vs value size (tcp, 1 client)"));
    assert!(out.join("fig13-put-latency.png").exists() && out.join("SUMMARY.md").exists());

    // --overwrite starts the preset again, logs included: with one repeat, no log of
    // a second or third repeat is left to pass for this run's. Another preset's log
    // and other files stay.
    std::fs::write(out.join("peers-kept.hlog"), "").unwrap();
    std::fs::write(out.join("notes.txt"), "").unwrap();
    ok(tiny_latency(&out, &["--overwrite", "--repeats", "1"]));
    assert_eq!(Table::read(&out.join("latency.csv")).unwrap().rows.len(), 6);
    let logs: Vec<String> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".hlog"))
        .collect();
    assert!(logs.iter().all(|n| !n.contains(".r1.") && !n.contains(".r2.")), "{logs:?}");
    assert!(out.join("latency-boom-32.put.hlog").exists(), "{logs:?}");
    assert!(out.join("peers-kept.hlog").exists() && out.join("notes.txt").exists());
}

#[test]
fn each_repeat_of_the_transport_floor_is_a_measurement_of_its_own() {
    // The floor was measured once and every repeat's row copied from it: the repeats
    // then "agreed" exactly, whatever the machine did.
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("floor");
    ok(boomctl()
        .args(["sweep", "transport", "--quick", "--sizes", "64", "--ops", "300", "--transport", "shm"])
        .args(["--repeats", "3", "--quiet", "--out"])
        .arg(&out)
        .output()
        .unwrap());
    let t = Table::read(&out.join("transport.csv")).unwrap();
    assert_eq!(t.rows.len(), 3, "one row per repeat");
    let measured = |i: usize| {
        ["write_imm_reply_avg_us", "send_recv_avg_us", "msg_rate_mpps"].map(|c| t.str(i, c).unwrap().to_string())
    };
    assert!(measured(0) != measured(1) && measured(1) != measured(2), "{:?}", (0..3).map(measured).collect::<Vec<_>>());
    if std::thread::available_parallelism().map_or(1, usize::from) >= 2 {
        let setup = std::fs::read_to_string(out.join("SETUP.md")).unwrap();
        assert!(setup.contains("the transport floor's two threads on the first two CPUs"), "{setup}");
    }
}

#[test]
fn skew_sweep_counts_real_in_place_updates() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("skew");
    ok(boomctl()
        .args(["sweep", "skew", "--quick", "--thetas", "uniform,1.1", "--keys", "512", "--ops", "1024"])
        .args(["--segment-sizes", "1M", "--transport", "tcp", "--repeats", "1", "--quiet", "--out"])
        .arg(&out)
        .output()
        .unwrap());
    let t = Table::read(&out.join("skew.csv")).unwrap();
    assert_eq!(t.rows.len(), 4, "2 thetas x hybrid/append");
    let row = |theta: &str, mode: &str| {
        let a = t.rows_where("theta", theta).unwrap();
        *t.rows_where("mode", mode).unwrap().iter().find(|i| a.contains(i)).unwrap()
    };
    let (hot, append) = (row("1.1", "hybrid"), row("1.1", "append"));
    // The same logical bytes (in-place rewrites count entry bytes, appends count padded
    // slots: within 1%); hybrid updates really rewrote entries in place.
    let (lh, la) = (t.req(hot, "logical_bytes").unwrap(), t.req(append, "logical_bytes").unwrap());
    assert!((lh - la).abs() / la < 0.01, "{lh} vs {la}");
    assert!(t.req(hot, "entries_in_place").unwrap() > 0.0);
    assert_eq!(t.req(append, "entries_in_place").unwrap(), 0.0);
    assert!(t.req(hot, "pm_bytes_used").unwrap() < t.req(append, "pm_bytes_used").unwrap());
    assert!(t.req(hot, "space_change_pct").unwrap() < 0.0);
    let texts = svg(&out, "fig09-skew-space");
    for want in [
        "PM space used by 100% PUT vs request skew",
        "PM bytes used (MiB)",
        "BOOM-KV hybrid update",
        "append-only",
        "uniform",
        "Zipf 1.1",
    ] {
        assert!(has(&texts, want), "{want} not in {texts:?}");
    }
}

#[test]
fn bad_input_is_reported_with_the_file() {
    let dir = tempfile::tempdir().unwrap();
    // A CSV that does not parse: the error names the file and the line.
    let bad = dir.path().join("bad");
    std::fs::create_dir(&bad).unwrap();
    let header = LATENCY.columns().join(",");
    let mut row: Vec<&str> = vec![""; LATENCY.columns().len()];
    row[0] = "boom/32";
    row[LATENCY.columns().iter().position(|c| *c == "size").unwrap()] = "32";
    let put_p50 = LATENCY.columns().iter().position(|c| *c == "put_p50_us").unwrap();
    row[put_p50] = "fast";
    std::fs::write(bad.join("latency.csv"), format!("{header}\n{}\n", row.join(","))).unwrap();
    let out = boomctl().args(["sweep", "--plot-only"]).arg(&bad).output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("latency.csv, line 2") && err.contains("fast"), "{err}");

    // Bad axes fail before anything runs.
    let out =
        boomctl().args(["sweep", "latency", "--sizes", "12q", "--out"]).arg(dir.path().join("x")).output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--sizes"), "{}", String::from_utf8_lossy(&out.stderr));
    // ... also a value that parses but no run can use, and nothing is made for them
    let out = boomctl().args(["sweep", "latency", "--sizes", "0", "--out"]).arg(dir.path().join("y")).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--sizes: 0"), "{}", String::from_utf8_lossy(&out.stderr));
    // ... and an axis no preset of the sweep uses (it was ignored without a word)
    let out =
        boomctl().args(["sweep", "latency", "--threads", "4", "--out"]).arg(dir.path().join("w")).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("--threads: latency does not use it (it uses --sizes, --protocols, --ops, --workers)"),
        "{err}"
    );
    assert!(
        !dir.path().join("x").exists() && !dir.path().join("y").exists() && !dir.path().join("w").exists(),
        "an output directory was made"
    );
    // A grid file's axes may serve other presets: not refused.
    let grid = dir.path().join("g.grid");
    std::fs::write(&grid, "preset = transport\nquick = true\nsizes = 64\nprotocols = boom\nops = 50\nrepeats = 1\n")
        .unwrap();
    ok(boomctl()
        .args(["sweep", "--quiet", "--grid"])
        .arg(&grid)
        .arg("--out")
        .arg(dir.path().join("g"))
        .output()
        .unwrap());
    // A server that is not there stops the sweep at its first point, not after all.
    let out = boomctl()
        .args(["sweep", "latency", "--quick", "--quiet", "--server", "127.0.0.1:1", "--out"])
        .arg(dir.path().join("z"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("boom/32 #1: cannot connect to tcp://127.0.0.1:1") && err.contains("sweep stops here"),
        "{err}"
    );
    let out = boomctl().args(["sweep", "nonsense"]).output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("invalid value 'nonsense'") && err.contains("possible values: transport, latency"), "{err}");

    // A grid file from workloads/.
    let g = dir.path().join("g.grid");
    std::fs::write(
        &g,
        "preset = latency\nsizes = 64\nprotocols = boom\nops = 50\ntransport = tcp\nquick = true\nrepeats = 1\n",
    )
    .unwrap();
    let out_dir = dir.path().join("grid");
    ok(boomctl().args(["sweep", "--quiet", "--grid"]).arg(&g).arg("--out").arg(&out_dir).output().unwrap());
    let t = Table::read(&out_dir.join("latency.csv")).unwrap();
    assert_eq!(t.rows.len(), 1);
    assert_eq!(t.str(0, "point").unwrap(), "boom/64");

    // Results files of earlier versions still render: one without the speed sample
    // (`speed_us`), and one from before repeats (no `repeat` either), whose rows are
    // repeat 0; one run per point gives no verdict.
    let csv = std::fs::read_to_string(out_dir.join("latency.csv")).unwrap();
    let (at_repeat, at_speed) = (t.col("repeat").unwrap(), t.col("speed_us").unwrap());
    for (name, drop) in [("old-speed", vec![at_speed]), ("old-repeat", vec![at_speed, at_repeat])] {
        let old = dir.path().join(name);
        std::fs::create_dir(&old).unwrap();
        let strip = |line: &str| {
            let f: Vec<&str> = line.split(',').enumerate().filter(|(i, _)| !drop.contains(i)).map(|(_, f)| f).collect();
            f.join(",")
        };
        let old_csv: Vec<String> = csv.lines().map(strip).collect();
        std::fs::write(old.join("latency.csv"), old_csv.join("\n") + "\n").unwrap();
        let stdout = ok(boomctl().args(["sweep", "--plot-only"]).arg(&old).output().unwrap());
        assert!(stdout.contains("one run per point: no interval and no verdict"), "{name}: {stdout}");
        // And a --resume extends it: the point already there is skipped, and the file
        // now has this version's columns, its row kept.
        let stdout = ok(boomctl()
            .args(["sweep", "--quiet", "--resume", "--grid"])
            .arg(&g)
            .arg("--out")
            .arg(&old)
            .output()
            .unwrap());
        assert!(stdout.contains("0 runs") && stdout.contains("(1 skipped, 0 failed)"), "{name}: {stdout}");
        let now = Table::read(&old.join("latency.csv")).unwrap();
        assert_eq!((now.header.clone(), now.rows.len()), (t.header.clone(), 1), "{name}");
        assert_eq!(now.str(0, "point").unwrap(), "boom/64", "{name}");
    }
}

/// A render removes the figures the last one drew and it does not: after an
/// `--overwrite` with fewer mixes, no figure of a dropped mix is left to pass for this
/// run's. Files it did not draw stay, whatever their names.
#[test]
fn an_overwrite_with_a_smaller_grid_leaves_no_stale_figure() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let ycsb = |mixes: &str, extra: &[&str]| {
        boomctl()
            .args(["sweep", "ycsb", "--quick", "--mixes", mixes, "--sizes", "32", "--protocols", "boom"])
            .args(["--ops", "200", "--transport", "tcp", "--quiet", "--out"])
            .arg(&out)
            .args(extra)
            .output()
            .unwrap()
    };
    ok(ycsb("a,c", &[]));
    for stem in ["fig15-ycsb-a", "fig17-ycsb-c"] {
        assert!(out.join(format!("{stem}.svg")).exists() && out.join(format!("{stem}.png")).exists(), "{stem}");
    }
    std::fs::write(out.join("fig99-mine.png"), "").unwrap();
    std::fs::write(dir.path().join("outside.png"), "").unwrap();
    // An edited list names no file outside the directory or of another kind.
    let list = out.join(boomkv::bench::sweep::FIGURE_LIST);
    let mut listed = std::fs::read_to_string(&list).unwrap();
    listed.push_str("../outside.png\nSETUP.md\n");
    std::fs::write(&list, listed).unwrap();

    let stdout = ok(ycsb("c", &["--overwrite"]));
    assert!(stdout.contains("removed 2 figure files") && stdout.contains("fig15-ycsb-a.svg"), "{stdout}");
    assert!(!out.join("fig15-ycsb-a.svg").exists() && !out.join("fig15-ycsb-a.png").exists());
    assert!(out.join("fig17-ycsb-c.svg").exists() && out.join("fig17-ycsb-c.png").exists());
    assert!(out.join("fig99-mine.png").exists() && out.join("SETUP.md").exists());
    assert!(dir.path().join("outside.png").exists());
    assert_eq!(std::fs::read_to_string(&list).unwrap(), "fig17-ycsb-c.png\nfig17-ycsb-c.svg\n");

    // Re-rendering what is there removes nothing.
    let stdout = ok(boomctl().args(["sweep", "--plot-only"]).arg(&out).output().unwrap());
    assert!(!stdout.contains("the last render drew"), "{stdout}");
    assert!(out.join("fig17-ycsb-c.svg").exists());
}
