//! A failed command: one line for stderr and the exit code, 2 when the command line itself is
//! wrong (bad flag values, flags that do not go together, an unreadable or invalid input) and 1
//! for a command that ran and failed (an unknown flow or run, a refusal, the database).

/// A failed command: its one-line message and exit code.
pub(crate) struct Failure {
    /// What went wrong, on one line.
    pub message: String,
    /// 2 for a wrong command line, 1 otherwise.
    pub exit_code: u8,
}

impl Failure {
    /// A wrong command line: the user can fix the command as typed.
    pub(crate) fn usage(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            exit_code: 2,
        }
    }

    /// Anything else: the command ran and failed.
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
            E::InvalidArguments(_) => Self::usage(message),
            _ => Self::runtime(message),
        }
    }
}

impl Failure {
    /// What to print on stderr: `error: <message>`, or with `--json` one JSON object
    /// (`{"error": "<message>", "exit_code": n}`) that a script can parse.
    pub(crate) fn rendered(&self, json: bool) -> String {
        if json {
            serde_json::json!({ "error": self.message, "exit_code": self.exit_code }).to_string()
        } else {
            format!("error: {}", self.message)
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
