//! What the SQL core promises its callers, read from the one place that lists it:
//! `functions/README.md`. Its table "Entry points and their roles" says which role may call
//! which function, and its table "Error codes" which `PFnnn` codes the functions raise. The
//! tests keep the rest in line with them: the grants an install leaves in the catalog, every
//! `errcode = 'PFnnn'` in the function files, and the runtime's mapping of codes to errors.

use crate::functions::FUNCTION_FILES;

/// The functions' README, embedded.
const README: &str = include_str!("../functions/README.md");

/// An entry point of the SQL core and the roles granted to call it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EntryPoint {
    /// The function's name in schema `pgflow`.
    pub function: &'static str,
    /// The roles that may call it (`pgflow_worker`, `pgflow_client`, `pgflow_operator`).
    pub roles: Vec<&'static str>,
}

/// Every entry point of the README's table "Entry points and their roles", in its order.
pub fn entry_points() -> Vec<EntryPoint> {
    table_rows("## Entry points and their roles")
        .filter_map(|cells| {
            let function = backticked(cells.first()?)?;
            let roles = cells.get(1)?.split(',').filter_map(backticked).collect();
            Some(EntryPoint { function, roles })
        })
        .collect()
}

/// The roles that may call `function` (a name in schema `pgflow`), or `None` when no role may.
pub fn roles_of(function: &str) -> Option<Vec<&'static str>> {
    entry_points()
        .into_iter()
        .find(|entry| entry.function == function)
        .map(|entry| entry.roles)
}

/// Every code of the README's table "Error codes", in its order.
pub fn documented_error_codes() -> Vec<&'static str> {
    table_rows("## Error codes")
        .filter_map(|cells| {
            let code = cells.first()?.trim();
            is_pgflow_code(code).then_some(code)
        })
        .collect()
}

/// Every distinct `PFnnn` code the function files raise (`errcode = 'PFnnn'`), sorted.
pub fn raised_error_codes() -> Vec<&'static str> {
    let mut codes: Vec<&'static str> = FUNCTION_FILES
        .iter()
        .flat_map(|file| file.sql.split("errcode = '").skip(1))
        .filter_map(|rest| rest.get(..5))
        .filter(|code| is_pgflow_code(code))
        .collect();
    codes.sort_unstable();
    codes.dedup();
    codes
}

/// `PF` and three digits.
fn is_pgflow_code(code: &str) -> bool {
    code.len() == 5 && code.starts_with("PF") && code[2..].bytes().all(|b| b.is_ascii_digit())
}

/// The cells of the body rows of the first table under `heading` (header and rule skipped).
fn table_rows(heading: &str) -> impl Iterator<Item = Vec<&'static str>> {
    let section = README
        .split_once(heading)
        .map_or("", |(_, after)| after.split("\n## ").next().unwrap_or(""));
    section
        .lines()
        .skip_while(|line| !line.starts_with('|'))
        .take_while(|line| line.starts_with('|'))
        .skip(2)
        .map(|line| line.trim().trim_matches('|').split('|').collect())
}

/// The text between the first pair of backticks in `cell`.
fn backticked(cell: &'static str) -> Option<&'static str> {
    let (_, rest) = cell.split_once('`')?;
    rest.split_once('`').map(|(inside, _)| inside)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_raised_error_code_has_a_row_and_every_row_is_raised() {
        let mut documented = documented_error_codes();
        documented.sort_unstable();
        assert!(
            !documented.is_empty(),
            "the README's error table was not found"
        );
        let raised = raised_error_codes();
        let missing: Vec<_> = raised.iter().filter(|c| !documented.contains(c)).collect();
        let unused: Vec<_> = documented.iter().filter(|c| !raised.contains(c)).collect();
        assert!(
            missing.is_empty(),
            "raised in functions/ but without a row under \"Error codes\" in \
             functions/README.md: {missing:?}"
        );
        assert!(
            unused.is_empty(),
            "documented under \"Error codes\" but raised by no function: {unused:?}"
        );
        let mut deduped = documented.clone();
        deduped.dedup();
        assert_eq!(deduped, documented, "a code has two rows");
    }

    /// The `--` comment block right above each `create or replace function pgflow.<name>(`, in
    /// the function files or a migration (the engine's clock lives in one).
    fn comment_blocks_of(function: &str) -> Vec<Vec<&'static str>> {
        let head = format!("create or replace function pgflow.{function}(");
        let mut blocks = Vec::new();
        let sources = FUNCTION_FILES
            .iter()
            .map(|file| file.sql)
            .chain(crate::migrations::migration_sources());
        for sql in sources {
            let lines: Vec<&'static str> = sql.lines().collect();
            for (at, line) in lines.iter().enumerate() {
                if line.starts_with(&head) {
                    let block = lines[..at]
                        .iter()
                        .rev()
                        .take_while(|l| l.starts_with("--"))
                        .copied()
                        .collect();
                    blocks.push(block);
                }
            }
        }
        blocks
    }

    #[test]
    fn every_entry_point_says_which_locks_it_takes() {
        let mut missing = Vec::new();
        for entry in entry_points() {
            let blocks = comment_blocks_of(entry.function);
            assert!(!blocks.is_empty(), "no function pgflow.{}", entry.function);
            for block in blocks {
                if !block.iter().any(|line| line.starts_with("-- Locks:")) {
                    missing.push(entry.function);
                }
            }
        }
        assert!(
            missing.is_empty(),
            "entry points without a `-- Locks:` line in the comment above them: {missing:?}"
        );
    }

    #[test]
    fn entry_points_name_known_roles_once() {
        let entries = entry_points();
        assert!(entries.len() > 40, "the README's roles table was not found");
        let known = ["pgflow_worker", "pgflow_client", "pgflow_operator"];
        for entry in &entries {
            assert!(!entry.roles.is_empty(), "{} has no role", entry.function);
            for role in &entry.roles {
                assert!(
                    known.contains(role),
                    "{}: unknown role {role}",
                    entry.function
                );
            }
        }
        let mut names: Vec<_> = entries.iter().map(|e| e.function).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), entries.len(), "an entry point has two rows");
        assert_eq!(
            roles_of("define_flow"),
            Some(vec!["pgflow_worker", "pgflow_operator"])
        );
        assert_eq!(roles_of("lock_runs"), None);
    }
}
