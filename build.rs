//! Embeds the shipped tables `tuning/*.toml` into the library and hashes the kernel
//! templates, so the selector can tell a table measured with other templates (stale) from
//! a current one.
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

    let mut templates = Vec::new();
    collect(&Path::new(&root).join("templates"), &mut templates);
    templates.sort();
    let mut s = String::from("concat!(\n");
    for p in &templates {
        writeln!(s, "    include_str!({:?}),", p.display().to_string()).unwrap();
        println!("cargo:rerun-if-changed={}", p.display());
    }
    s.push(')');
    std::fs::write(Path::new(&out).join("template_sources.rs"), s).unwrap();
    println!("cargo:rerun-if-changed=templates");
}

fn collect(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            collect(&p, out);
        } else {
            out.push(p);
        }
    }
}
