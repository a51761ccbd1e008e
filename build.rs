//! Embeds the shipped tables `tuning/*.toml` into the library. (Whether a table is
//! current is decided per entry at run time, from the hash of what its family compiles:
//! `trellis::tune::source_hash`.)
//!
//! Only the shipped tables are watched, each by name: `tuning/` itself is not, because
//! cargo watches a directory recursively, and `tuning/local/` (tables a tune run writes on
//! this machine, read at run time) and `tuning/reports/` must not trigger rebuilds. A table
//! newly added to `tuning/` is picked up by the next build that reruns this script (`touch
//! build.rs` forces one).

use std::fmt::Write;
use std::path::Path;

fn main() {
    let out = std::env::var("OUT_DIR").unwrap();
    let root = std::env::var("CARGO_MANIFEST_DIR").unwrap();
    let mut tables: Vec<_> = std::fs::read_dir(Path::new(&root).join("tuning"))
        .map(|rd| {
            rd.filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|e| e == "toml"))
                .collect()
        })
        .unwrap_or_default();
    tables.sort();
    let mut s = String::from("&[\n");
    for p in &tables {
        writeln!(
            s,
            "    ({:?}, include_str!({:?})),",
            p.file_name().unwrap().to_string_lossy(),
            p.display().to_string()
        )
        .unwrap();
    }
    s.push(']');
    std::fs::write(Path::new(&out).join("embedded_tables.rs"), s).unwrap();
    for p in &tables {
        println!("cargo:rerun-if-changed={}", p.display());
    }
    println!("cargo:rerun-if-changed=build.rs");
}
