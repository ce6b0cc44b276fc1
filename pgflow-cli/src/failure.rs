//! A failed command: one line for stderr and the exit code, 2 for bad input (unknown flow,
//! run, rollout or alias, bad arguments, pgflow not installed) and 1 for everything else.

/// A failed command: its one-line message and exit code.
pub(crate) struct Failure {
    /// What went wrong, on one line.
    pub message: String,
    /// 2 for bad input, 1 otherwise.
    pub exit_code: u8,
}

impl Failure {
    /// Bad input: the user can fix the command.
    pub(crate) fn usage(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            exit_code: 2,
        }
    }

    /// Anything else: the database, the network, the server.
    pub(crate) fn runtime(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            exit_code: 1,
        }
    }

    /// An error with its causes, on one line.
    pub(crate) fn runtime_chain(error: &dyn std::error::Error) -> Self {
        Self::runtime(one_line(error))
    }
}

impl From<pgflow::EngineError> for Failure {
    fn from(error: pgflow::EngineError) -> Self {
        use pgflow::EngineError as E;
        let message = error.to_string().replace('\n', " ");
        match error {
            E::UnknownFlow { .. }
            | E::UnknownRun { .. }
            | E::NotInstalled(_)
            | E::AliasMismatch(_)
            | E::Rollout(_)
            | E::UnknownSchedule { .. }
            | E::InvalidArguments(_) => Self::usage(message),
            _ => Self::runtime(message),
        }
    }
}

/// The error and its causes on one line.
fn one_line(error: &dyn std::error::Error) -> String {
    let mut line = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let text = cause.to_string();
        if !line.contains(&text) {
            line.push_str(": ");
            line.push_str(&text);
        }
        source = cause.source();
    }
    line.replace('\n', " ")
}
