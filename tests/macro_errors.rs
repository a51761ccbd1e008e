//! The proc macro's errors as a user meets them: each case under `tests/ui/` must fail
//! to compile with exactly the message and span of its `.stderr` (trybuild; refresh the
//! files with `TRYBUILD=overwrite cargo test --test macro_errors` and read the diff).
//! The messages themselves are unit-tested in `trellis-macros`; these pin where rustc
//! points (a field's name, the misspelt argument, the extent) and that nothing else
//! fails beside them.

#[test]
fn macro_errors_point_at_the_declaration() {
    // askama finds a kernel's template under the compiling crate's `templates/`, and
    // trybuild compiles the cases as a crate of its own in `<target>/tests/trybuild/trellis`:
    // the cases' template goes there first (the directory is trybuild's, made on demand).
    let target = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .expect("CARGO_TARGET_TMPDIR is `<target>/tmp`");
    let templates = target.join("tests/trybuild/trellis/templates");
    std::fs::create_dir_all(&templates).expect("create the cases' templates directory");
    std::fs::copy("tests/ui/ui.kernel", templates.join("ui.kernel"))
        .expect("copy the cases' template");
    trybuild::TestCases::new().compile_fail("tests/ui/*.rs");
}
