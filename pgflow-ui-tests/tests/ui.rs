//! Compile-time guarantees of `#[flow]` / `#[step]`: every file in `tests/ui/fail` must fail
//! with the checked-in `.stderr`, every file in `tests/ui/pass` must compile, and no expected
//! error names `pgflow::__private`.
//!
//! After an intended change of a message, regenerate the expectations with
//! `TRYBUILD=overwrite cargo test -p pgflow-ui-tests` and review the diff.

#[test]
fn ui() {
    let cases = trybuild::TestCases::new();
    cases.pass("tests/ui/pass/*.rs");
    cases.compile_fail("tests/ui/fail/*.rs");
}

/// No compile error of a flow names `pgflow::__private`: its help and notes name the rules
/// (`pgflow::rules`) or nothing of ours.
#[test]
fn no_expected_error_names_the_private_module() {
    let fail = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/ui/fail");
    for entry in std::fs::read_dir(&fail).expect("tests/ui/fail") {
        let path = entry.expect("a directory entry").path();
        if path.extension().is_some_and(|e| e == "stderr") {
            let text = std::fs::read_to_string(&path).expect("readable");
            assert!(
                !text.contains("__private"),
                "{} names pgflow::__private:\n{text}",
                path.display()
            );
        }
    }
}
