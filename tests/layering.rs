//! The library's rooms and their layers (docs/ARCHITECTURE.md states the same table):
//! a room may use only rooms of lower layers. This test reads every `crate::ROOM` path
//! in the library's code (comments skipped; `#[cfg(test)]` modules may use any room, as
//! tests run a whole server) and fails on an import from the same or a higher layer.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// Bottom up. Rooms of one layer do not use each other.
const LAYERS: &[&[&str]] = &[
    &["error"],
    &["units", "cpus", "pmem", "index", "measure"],
    &["log"],
    &["transport"],
    &["wire"],
    &["link", "service"],
    &["proto"],
    &["client", "server"],
    &["workload"],
    &["bench", "crashtest"],
];

/// Macros exported at the crate root, and the room that defines them.
const MACROS: &[(&str, &str)] = &[("conformance_suite", "transport"), ("with_transport", "transport")];

fn layer_of(room: &str) -> Option<usize> {
    LAYERS.iter().position(|l| l.contains(&room))
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The code of `src` without comments and without `#[cfg(test)]` modules.
fn code_outside_tests(src: &str) -> String {
    let mut out = String::new();
    let mut skip_depth: Option<i64> = None;
    let mut depth = 0i64;
    let mut test_attr = false;
    for line in src.lines() {
        let code = line.split("//").next().unwrap_or("");
        let t = code.trim();
        if t.starts_with("#[cfg(test)]") {
            test_attr = true;
            continue;
        }
        let opens = code.matches('{').count() as i64;
        let closes = code.matches('}').count() as i64;
        if skip_depth.is_none() && test_attr && t.contains("mod ") && opens > 0 {
            skip_depth = Some(depth);
        }
        if !t.is_empty() {
            test_attr = false;
        }
        depth += opens - closes;
        match skip_depth {
            Some(d) if depth <= d => skip_depth = None,
            Some(_) => {}
            None => {
                out.push_str(code);
                out.push('\n');
            }
        }
    }
    out
}

#[test]
fn no_room_uses_a_room_of_its_own_or_a_higher_layer() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/lib");
    let mut files = Vec::new();
    rust_files(&root, &mut files);
    files.sort();
    let mut bad = BTreeSet::new();
    for f in &files {
        let rel = f.strip_prefix(&root).unwrap();
        let first = rel.components().next().unwrap().as_os_str().to_string_lossy().into_owned();
        let room = first.trim_end_matches(".rs").to_string();
        if room == "lib" {
            continue;
        }
        let Some(mine) = layer_of(&room) else {
            bad.insert(format!(
                "{}: room `{room}` is in no layer (add it to LAYERS and docs/ARCHITECTURE.md)",
                rel.display()
            ));
            continue;
        };
        let code = code_outside_tests(&std::fs::read_to_string(f).unwrap());
        for (i, _) in code.match_indices("crate::") {
            let name: String = code[i + 7..].chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
            let used = MACROS.iter().find(|(m, _)| *m == name).map(|(_, r)| r.to_string()).unwrap_or(name);
            if used == room || used == "Error" || used == "Result" {
                continue;
            }
            match layer_of(&used) {
                Some(theirs) if theirs < mine => {}
                Some(_) => {
                    bad.insert(format!("{}: `{room}` uses `{used}`, which is not below it", rel.display()));
                }
                None => {
                    bad.insert(format!("{}: `{room}` uses `{used}`, which is in no layer", rel.display()));
                }
            }
        }
    }
    assert!(bad.is_empty(), "layering violations:\n{}", bad.into_iter().collect::<Vec<_>>().join("\n"));
}
