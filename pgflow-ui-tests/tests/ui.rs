//! Compile-time guarantees of `#[flow]` / `#[step]`: every file in `tests/ui/fail` must fail
//! with the checked-in `.stderr`, every file in `tests/ui/pass` must compile.
//!
//! After an intended change of a message, regenerate the expectations with
//! `TRYBUILD=overwrite cargo test -p pgflow-ui-tests` and review the diff.

#[test]
fn ui() {
    let cases = trybuild::TestCases::new();
    cases.pass("tests/ui/pass/*.rs");
    cases.compile_fail("tests/ui/fail/*.rs");
}
