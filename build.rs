//! Records the git commit the binary is built from (BOOMKV_COMMIT), for `--version`,
//! the run configuration in reports and a sweep's SETUP.md: the short hash, with
//! `-dirty` when tracked files differ from it; "unknown" outside a git checkout.

fn main() {
    let git = |args: &[&str]| {
        std::process::Command::new("git")
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    };
    let commit = match git(&["rev-parse", "--short=12", "HEAD"]).filter(|c| !c.is_empty()) {
        Some(c) if git(&["status", "--porcelain", "--untracked-files=no"]).is_some_and(|s| !s.is_empty()) => {
            format!("{c}-dirty")
        }
        Some(c) => c,
        None => "unknown".into(),
    };
    println!("cargo:rustc-env=BOOMKV_COMMIT={commit}");
    // Again when a commit is made or checked out, or a source changes (these lines
    // replace cargo's default of any file of the package). Only paths that exist: cargo
    // reruns a script with a missing one on every build, recompiling the crate each time.
    for p in [".git/HEAD", ".git/index", ".git/refs", "src", "tests", "Cargo.toml", "Cargo.lock", "build.rs"] {
        if std::path::Path::new(p).exists() {
            println!("cargo:rerun-if-changed={p}");
        }
    }
}
