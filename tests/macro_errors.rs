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

/// The macro refuses upper-case names of two or more characters (`check_c_name`) because
/// the dialect headers and kernel bodies define their macros in that space: a tensor
/// named like one would be expanded away. Every `#define` of the units' sources must stay
/// there (the MSL shim, a host compile's stand-in for Metal's built-ins, is not a unit's).
#[test]
fn every_template_macro_is_upper_case() {
    fn walk(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
        for e in std::fs::read_dir(dir).expect("read templates/") {
            let p = e.expect("a templates/ entry").path();
            if p.is_dir() {
                if p.file_name().is_some_and(|n| n != "msl_shim") {
                    walk(&p, out);
                }
            } else {
                out.push(p);
            }
        }
    }
    let mut files = Vec::new();
    walk(std::path::Path::new("templates"), &mut files);
    let mut names = 0;
    for f in &files {
        let text = std::fs::read_to_string(f).expect("a template is text");
        for line in text.lines() {
            let Some(rest) = line.trim_start().strip_prefix("#define") else {
                continue;
            };
            let name: String = rest
                .trim_start()
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            assert!(
                name.len() > 1 && !name.chars().any(|c| c.is_ascii_lowercase()),
                "{}: `#define {name}` is outside the macros' space (upper case, two or more \
                 characters), so a tensor may take its name",
                f.display()
            );
            names += 1;
        }
    }
    assert!(names > 40, "found only {names} #defines under templates/");
}

/// MLX declares a thread attribute wherever its name is in a kernel's body, so a tensor
/// of that name would be declared twice: the macro refuses every one of them
/// (`C_RESERVED`), not only those the Metal entry binds.
#[test]
fn every_mlx_thread_attribute_is_reserved() {
    let src = std::fs::read_to_string("trellis-macros/src/lib.rs").expect("read the macro");
    // The list's own lines, not a string of the same name elsewhere in the file.
    let start = src
        .find("const C_RESERVED: &[&str] = &[\n")
        .expect("the macro's C_RESERVED");
    let list = &src[start..];
    let list = &list[..=list.find("\n];\n").expect("C_RESERVED's end")];
    for (name, _) in trellis::codegen::metal::THREAD_ATTRIBUTES {
        assert!(
            list.contains(&format!("    \"{name}\",\n")),
            "`{name}` is no entry of the macro's C_RESERVED"
        );
    }
}
