//! A small command-line parser shared by every binary: `--name value`,
//! `--name=value`, short aliases, boolean flags, defaults, environment
//! fallbacks, and a `--help` text generated from the same table. An option
//! that was renamed keeps its old names as aliases (on the command line, in
//! `--config` files and in the environment), so what worked before still does.
//!
//!
//! Every option is a named [`Opt`] constant, and [`Matches`] is read with
//! that constant, never with a string: a misspelt option is a compile
//! error. A binary reads its [`Matches`] once, at start, into its own typed
//! configuration; library crates never see an option.
//!
//! ```
//! use confboot_util::args::{Command, Opt, VERBOSITY};
//! const PORT: Opt = Opt::value("port", "PORT", "TCP port to listen on").default("9090");
//! const DRY_RUN: Opt = Opt::flag("dry-run", "Only print what would be done");
//! const CMD: Command = Command {
//!     name: "demo",
//!     about: "Shows how options are parsed.",
//!     usage: "demo [OPTIONS]",
//!     opts: &[PORT, DRY_RUN, VERBOSITY],
//! };
//! let m = CMD.parse(["--port=80", "-v", "4"].iter().map(|s| s.to_string())).unwrap();
//! assert_eq!(m.value(&PORT), Some("80"));
//! assert!(!m.flag(&DRY_RUN));
//! assert_eq!(m.verbosity().unwrap(), 4);
//! ```
//!
//! Reading an option the command does not declare is a bug of the binary
//! and panics, naming the command and the option; each binary has a test
//! that reads its whole configuration from a parse of its own table.

use std::fmt;
use std::str::FromStr;

/// One option of a command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Opt {
    /// Long name, without the leading `--`.
    pub long: &'static str,
    /// Optional one-letter alias, used as `-x`.
    pub short: Option<char>,
    /// Name of the value in the help text; `None` for a boolean flag.
    pub value_name: Option<&'static str>,
    /// One line of help.
    pub help: &'static str,
    /// Value used when the option is not given.
    pub default: Option<&'static str>,
    /// Environment variable read when the option is not given.
    pub env: Option<&'static str>,
    /// Old long names that still work (command line and `--config` keys).
    pub aliases: &'static [&'static str],
    /// Old environment variables that still work, read after [`Opt::env`].
    pub env_aliases: &'static [&'static str],
}

impl Opt {
    /// An option that takes a value.
    pub const fn value(long: &'static str, value_name: &'static str, help: &'static str) -> Opt {
        Opt {
            long,
            short: None,
            value_name: Some(value_name),
            help,
            default: None,
            env: None,
            aliases: &[],
            env_aliases: &[],
        }
    }

    /// A boolean flag.
    pub const fn flag(long: &'static str, help: &'static str) -> Opt {
        Opt {
            long,
            short: None,
            value_name: None,
            help,
            default: None,
            env: None,
            aliases: &[],
            env_aliases: &[],
        }
    }

    /// Sets the default value.
    pub const fn default(mut self, value: &'static str) -> Opt {
        self.default = Some(value);
        self
    }

    /// Sets the one-letter alias.
    pub const fn short(mut self, c: char) -> Opt {
        self.short = Some(c);
        self
    }

    /// Sets the environment variable read when the option is absent.
    pub const fn env(mut self, var: &'static str) -> Opt {
        self.env = Some(var);
        self
    }

    /// Sets the old long names the option is still known by.
    pub const fn aliases(mut self, names: &'static [&'static str]) -> Opt {
        self.aliases = names;
        self
    }

    /// Sets the old environment variables still read, after [`Opt::env`].
    pub const fn env_aliases(mut self, vars: &'static [&'static str]) -> Opt {
        self.env_aliases = vars;
        self
    }

    /// Whether `name` (a long name without `--`) names this option.
    pub fn is_named(&self, name: &str) -> bool {
        self.long == name || self.aliases.contains(&name)
    }
}

/// The `-v N` option every binary has (klog levels: 2 always, 4 general, 6 low level).
pub const VERBOSITY: Opt = Opt {
    long: "verbosity",
    short: Some('v'),
    value_name: Some("N"),
    help: "Log verbosity: 0 errors and warnings, 2 start and requests, 4 general, 6 low level",
    default: Some("2"),
    env: None,
    aliases: &[],
    env_aliases: &[],
};

/// The `--config FILE` option of the daemons: a JSON file with option
/// values ([`Matches::load_config_file`], read by [`start_daemon`]).
pub const CONFIG: Opt = Opt::value("config", "FILE", "JSON file with option values");

/// A command: its name, what it does, and its options.
#[derive(Clone, Copy, Debug)]
pub struct Command {
    /// Name as typed.
    pub name: &'static str,
    /// What the command does, one paragraph.
    pub about: &'static str,
    /// Usage line.
    pub usage: &'static str,
    /// The options.
    pub opts: &'static [Opt],
}

/// Why the arguments could not be parsed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ArgsError {
    /// `--help` or `-h` was given: print [`Command::help`] and exit 0.
    #[error("help requested")]
    HelpRequested,
    /// An option that the command does not have, and none is near it.
    #[error("unknown option {0}")]
    Unknown(String),
    /// An option that the command does not have, a few letters away from
    /// one it has ([`nearest`]).
    #[error("unknown option {given}; did you mean --{nearest}?")]
    Misspelt {
        /// The option as given (`--measurments`).
        given: String,
        /// The long name of the nearest option the command has.
        nearest: &'static str,
    },
    /// A command (a word where a subcommand is expected) that does not
    /// exist, with the nearest one when one is near ([`nearest`]).
    #[error("unknown command {given:?}{}", nearest.map_or_else(String::new, |n| format!("; did you mean {n}?")))]
    UnknownCommand {
        /// The word as given.
        given: String,
        /// The nearest command there is.
        nearest: Option<&'static str>,
    },
    /// An argument where the command takes none but options.
    #[error("unexpected argument {0:?}")]
    Unexpected(String),
    /// An option that needs a value was last.
    #[error("option --{0} needs a value")]
    MissingValue(String),
    /// A flag was given a value (`--flag=x`).
    #[error("option --{0} takes no value")]
    UnexpectedValue(String),
    /// A value could not be converted.
    #[error("invalid value {value:?} for --{option}: {reason}")]
    Invalid {
        /// The option.
        option: String,
        /// The value given.
        value: String,
        /// Why it is wrong.
        reason: String,
    },
    /// A required option is absent.
    #[error("option --{0} is required")]
    Required(String),
}

/// The parsed arguments of a command.
#[derive(Clone, Debug)]
pub struct Matches {
    cmd: Command,
    given: Vec<(&'static str, Option<String>)>,
    from_env: Vec<(&'static str, String)>,
    from_file: Vec<(&'static str, String)>,
    positional: Vec<String>,
}

impl Command {
    /// Whether this command declares `opt` (the same option, under the
    /// same long name).
    pub fn declares(&self, opt: &Opt) -> bool {
        self.opts.contains(opt)
    }

    /// Parses the arguments that follow the command name.
    pub fn parse<I: IntoIterator<Item = String>>(&self, args: I) -> Result<Matches, ArgsError> {
        self.parse_with_env(args, |var| std::env::var(var).ok())
    }

    /// [`Command::parse`] with the environment given by `env`.
    fn parse_with_env<I: IntoIterator<Item = String>>(
        &self,
        args: I,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Matches, ArgsError> {
        let mut given = Vec::new();
        let mut positional = Vec::new();
        let mut it = args.into_iter();
        while let Some(arg) = it.next() {
            if arg == "--help" || arg == "-h" {
                return Err(ArgsError::HelpRequested);
            }
            if arg == "--" {
                positional.extend(it.by_ref());
                break;
            }
            let (opt, inline) = if let Some(rest) = arg.strip_prefix("--") {
                let (name, inline) = match rest.split_once('=') {
                    Some((n, v)) => (n, Some(v.to_string())),
                    None => (rest, None),
                };
                let opt = self.opts.iter().find(|o| o.is_named(name));
                let unknown = || {
                    let longs = self.opts.iter().map(|o| o.long).chain(["help"]);
                    match nearest(name, longs) {
                        Some(nearest) => ArgsError::Misspelt {
                            given: format!("--{name}"),
                            nearest,
                        },
                        None => ArgsError::Unknown(arg.clone()),
                    }
                };
                (opt.ok_or_else(unknown)?, inline)
            } else if arg.len() >= 2
                && arg.starts_with('-')
                && !arg[1..].starts_with(|c: char| c.is_ascii_digit())
            {
                let mut chars = arg[1..].chars();
                let c = chars.next().expect("length checked");
                let rest: String = chars.collect();
                let opt = self.opts.iter().find(|o| o.short == Some(c));
                let opt = opt.ok_or_else(|| ArgsError::Unknown(arg.clone()))?;
                (
                    opt,
                    if rest.is_empty() {
                        None
                    } else {
                        Some(rest.trim_start_matches('=').to_string())
                    },
                )
            } else {
                positional.push(arg);
                continue;
            };
            let value = match (opt.value_name, inline) {
                (None, None) => None,
                (None, Some(_)) => return Err(ArgsError::UnexpectedValue(opt.long.into())),
                (Some(_), Some(v)) => Some(v),
                (Some(_), None) => Some(
                    it.next()
                        .ok_or_else(|| ArgsError::MissingValue(opt.long.into()))?,
                ),
            };
            given.push((opt.long, value));
        }
        let from_env = self
            .opts
            .iter()
            .filter_map(|o| {
                let value = o.env.iter().chain(o.env_aliases).find_map(|var| env(var))?;
                Some((o.long, value))
            })
            .collect();
        Ok(Matches {
            cmd: *self,
            given,
            from_env,
            from_file: Vec::new(),
            positional,
        })
    }

    /// The help text: what the command does, usage, and every option.
    pub fn help(&self) -> String {
        let mut s = format!("{}\n\nUsage: {}\n\nOptions:\n", self.about, self.usage);
        let mut rows: Vec<(String, String)> = self
            .opts
            .iter()
            .map(|o| {
                let short = o
                    .short
                    .map_or_else(|| "    ".to_string(), |c| format!("-{c}, "));
                let left = match o.value_name {
                    Some(v) => format!("  {short}--{} {v}", o.long),
                    None => format!("  {short}--{}", o.long),
                };
                let mut right = o.help.to_string();
                if let Some(d) = o.default {
                    right.push_str(&format!(" [default: {d}]"));
                }
                let vars: Vec<&str> = o.env.iter().chain(o.env_aliases).copied().collect();
                if !vars.is_empty() {
                    right.push_str(&format!(" [env: {}]", vars.join(", ")));
                }
                if !o.aliases.is_empty() {
                    let names: Vec<String> = o.aliases.iter().map(|a| format!("--{a}")).collect();
                    right.push_str(&format!(" [formerly: {}]", names.join(", ")));
                }
                (left, right)
            })
            .collect();
        rows.push(("  -h, --help".into(), "Print this help".into()));
        let width = rows.iter().map(|(l, _)| l.len()).max().unwrap_or(0) + 2;
        for (l, r) in rows {
            s.push_str(&format!("{l:width$}{r}\n"));
        }
        s
    }
}

impl Matches {
    /// The command's own entry for `opt`. Reading an option the command
    /// does not declare (or declares differently) is a bug of the binary:
    /// it panics, naming both.
    fn declared(&self, opt: &Opt) -> &Opt {
        let declared = self
            .cmd
            .opts
            .iter()
            .find(|o| o.long == opt.long)
            .unwrap_or_else(|| {
                panic!(
                    "command {} reads option --{}, which its option table does not declare",
                    self.cmd.name, opt.long
                )
            });
        assert!(
            declared == opt,
            "command {} reads option --{} as {opt:?}, but declares it as {declared:?}",
            self.cmd.name,
            opt.long
        );
        declared
    }

    /// Reads option values from a JSON configuration file (at most
    /// [`crate::fs::MAX_CONFIG_FILE_BYTES`]): an object whose keys are long
    /// option names (or their aliases) and whose values are strings, numbers
    /// or booleans (arrays for repeatable options). Values from the command
    /// line and the environment take precedence over the file.
    pub fn load_config_file(&mut self, path: &std::path::Path) -> Result<(), ArgsError> {
        let invalid = |reason: String| ArgsError::Invalid {
            option: CONFIG.long.into(),
            value: path.display().to_string(),
            reason,
        };
        let text = crate::fs::read_bounded_text(path, crate::fs::MAX_CONFIG_FILE_BYTES)
            .map_err(|e| invalid(e.to_string()))?;
        let root: serde_json::Value =
            serde_json::from_str(&text).map_err(|e| invalid(e.to_string()))?;
        let obj = root
            .as_object()
            .ok_or_else(|| invalid("must be a JSON object".into()))?;
        let scalar = |key: &str, v: &serde_json::Value| match v {
            serde_json::Value::String(s) => Ok(s.clone()),
            serde_json::Value::Number(n) => Ok(n.to_string()),
            serde_json::Value::Bool(b) => Ok(b.to_string()),
            _ => Err(invalid(format!(
                "{key:?} must be a string, number or boolean"
            ))),
        };
        for (key, v) in obj {
            let opt = self
                .cmd
                .opts
                .iter()
                .find(|o| o.is_named(key) && o.long != CONFIG.long)
                .ok_or_else(|| invalid(format!("unknown option {key:?}")))?;
            match v {
                serde_json::Value::Array(items) => {
                    for item in items {
                        self.from_file.push((opt.long, scalar(key, item)?));
                    }
                }
                _ => self.from_file.push((opt.long, scalar(key, v)?)),
            }
        }
        Ok(())
    }

    /// The value of an option: the last one given, else its environment
    /// variable, else the configuration file, else its default.
    pub fn value(&self, opt: &Opt) -> Option<&str> {
        let opt = self.declared(opt);
        let long = opt.long;
        if let Some((_, v)) = self.given.iter().rev().find(|(n, _)| *n == long) {
            return v.as_deref();
        }
        self.env_value(long)
            .or_else(|| {
                self.from_file
                    .iter()
                    .rev()
                    .find(|(n, _)| *n == long)
                    .map(|(_, v)| v.as_str())
            })
            .or(opt.default)
    }

    /// Every value given for a repeatable option, in order.
    pub fn values(&self, opt: &Opt) -> Vec<&str> {
        let long = self.declared(opt).long;
        let given: Vec<&str> = self
            .given
            .iter()
            .filter(|(n, _)| *n == long)
            .filter_map(|(_, v)| v.as_deref())
            .collect();
        if !given.is_empty() {
            return given;
        }
        self.from_file
            .iter()
            .filter(|(n, _)| *n == long)
            .map(|(_, v)| v.as_str())
            .collect()
    }

    /// The value of a required option.
    pub fn required(&self, opt: &Opt) -> Result<&str, ArgsError> {
        self.value(opt)
            .ok_or_else(|| ArgsError::Required(opt.long.into()))
    }

    /// Whether a flag was given (or its environment variable is `1`/`true`).
    pub fn flag(&self, opt: &Opt) -> bool {
        let long = self.declared(opt).long;
        let truthy = |v: &str| v == "1" || v == "true";
        self.given.iter().any(|(n, _)| *n == long)
            || self.env_value(long).is_some_and(truthy)
            || self
                .from_file
                .iter()
                .rev()
                .find(|(n, _)| *n == long)
                .is_some_and(|(_, v)| truthy(v))
    }

    fn env_value(&self, long: &str) -> Option<&str> {
        self.from_env
            .iter()
            .find(|(n, _)| *n == long)
            .map(|(_, v)| v.as_str())
    }

    /// The value of an option converted with [`FromStr`].
    pub fn parsed<T: FromStr>(&self, opt: &Opt) -> Result<Option<T>, ArgsError>
    where
        T::Err: fmt::Display,
    {
        self.value(opt)
            .map(|v| {
                v.parse().map_err(|e: T::Err| ArgsError::Invalid {
                    option: opt.long.into(),
                    value: v.into(),
                    reason: e.to_string(),
                })
            })
            .transpose()
    }

    /// The `-v` verbosity (see [`VERBOSITY`]).
    pub fn verbosity(&self) -> Result<u8, ArgsError> {
        Ok(self.parsed::<u8>(&VERBOSITY)?.unwrap_or(2))
    }

    /// Arguments that are not options, in order.
    pub fn positional(&self) -> &[String] {
        &self.positional
    }

    /// Refuses an argument that is not an option, for a command that
    /// takes none ([`ArgsError::Unexpected`] names the first).
    pub fn no_positional(&self) -> Result<(), ArgsError> {
        match self.positional.first() {
            Some(extra) => Err(ArgsError::Unexpected(extra.clone())),
            None => Ok(()),
        }
    }
}

/// The name in `known` nearest to `given` (a misspelt option or command),
/// when one is near enough to be what was meant: at most a third of
/// `given`'s letters (and at least one) away, counting an insertion, a
/// deletion, a substitution or a swap of two neighbours as one edit. Ties
/// go to the first in `known`.
pub fn nearest<'a>(given: &str, known: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let limit = (given.chars().count() / 3).max(1);
    known
        .into_iter()
        .map(|name| (edit_distance(given, name), name))
        .filter(|(d, _)| *d <= limit)
        .min_by_key(|(d, _)| *d)
        .map(|(_, name)| name)
}

/// The optimal-string-alignment distance between `a` and `b`, by
/// characters: Levenshtein's edits plus the swap of two neighbours.
fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    // rows[i][j]: the distance between a[..i] and b[..j]; three rows kept.
    let mut before: Vec<usize> = Vec::new();
    let mut previous: Vec<usize> = (0..=b.len()).collect();
    for i in 1..=a.len() {
        let mut current = vec![i; b.len() + 1];
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut d = (previous[j] + 1)
                .min(current[j - 1] + 1)
                .min(previous[j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                d = d.min(before[j - 2] + 1);
            }
            current[j] = d;
        }
        before = std::mem::replace(&mut previous, current);
    }
    previous[b.len()]
}

/// Parses `std::env::args()` for a binary: prints help and exits 0 on
/// `--help`, prints the error and a hint and exits 2 on bad arguments
/// (a misspelt option names the nearest one).
pub fn parse_or_exit(cmd: &Command, args: impl IntoIterator<Item = String>) -> Matches {
    match cmd.parse(args) {
        Ok(m) => m,
        Err(ArgsError::HelpRequested) => {
            print!("{}", cmd.help());
            std::process::exit(0);
        }
        Err(e) => {
            eprintln!("{}: {e}\nTry '{} --help'.", cmd.name, cmd.name);
            std::process::exit(2);
        }
    }
}

/// Prints a usage error of `cmd` with a hint and exits 2.
pub fn exit_usage(cmd: &Command, error: &dyn std::fmt::Display) -> ! {
    eprintln!("{}: {error}\nTry '{} --help'.", cmd.name, cmd.name);
    std::process::exit(2);
}

/// Starts a daemon (the bootstrapper, joinsvc, the node agent): parses
/// `std::env::args()` as [`parse_or_exit`] does, reads the [`CONFIG`] JSON
/// file when one is named (flags win over it), and installs logging at the
/// `-v` level under `component`. A bad file or level, or an argument that
/// is not an option, exits 2. `cmd` must declare [`CONFIG`] and
/// [`VERBOSITY`].
pub fn start_daemon(cmd: &Command, component: &'static str) -> Matches {
    let mut m = parse_or_exit(cmd, std::env::args().skip(1));
    if let Err(e) = m.no_positional() {
        exit_usage(cmd, &e);
    }
    if let Some(path) = m.value(&CONFIG).map(std::path::PathBuf::from)
        && let Err(e) = m.load_config_file(&path)
    {
        exit_usage(cmd, &e);
    }
    let verbosity = m.verbosity().unwrap_or_else(|e| exit_usage(cmd, &e));
    crate::logging::init(component, verbosity);
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    const LISTEN: Opt = Opt::value("listen", "ADDR", "Where to listen")
        .default("0.0.0.0:9090")
        .short('l');
    const ENDPOINT: Opt = Opt::value("endpoint", "HOST:PORT", "A peer (repeatable)");
    const INSECURE: Opt = Opt::flag("insecure", "Skip checks");
    const MEASUREMENTS: Opt = Opt::value("measurements", "FILE", "Expected measurements")
        .env("T_MEASUREMENTS")
        .aliases(&["policy", "expected"])
        .env_aliases(&["T_POLICY"]);

    const CMD: Command = Command {
        name: "t",
        about: "Test command.",
        usage: "t [OPTIONS] [FILE]",
        opts: &[LISTEN, ENDPOINT, INSECURE, MEASUREMENTS, VERBOSITY],
    };

    fn parse(a: &[&str]) -> Result<Matches, ArgsError> {
        CMD.parse(a.iter().map(|s| s.to_string()))
    }

    #[test]
    fn forms_defaults_and_positionals() {
        let m = parse(&[
            "--listen",
            "1.2.3.4:1",
            "x",
            "--endpoint=a",
            "--endpoint",
            "b",
            "-v6",
        ])
        .unwrap();
        assert_eq!(m.value(&LISTEN), Some("1.2.3.4:1"));
        assert_eq!(m.values(&ENDPOINT), vec!["a", "b"]);
        assert_eq!(m.verbosity().unwrap(), 6);
        assert_eq!(m.positional(), ["x"]);
        let m = parse(&["-l", "h:2", "--insecure"]).unwrap();
        assert_eq!(m.value(&LISTEN), Some("h:2"));
        assert!(m.flag(&INSECURE));
        let m = parse(&[]).unwrap();
        assert_eq!(m.value(&LISTEN), Some("0.0.0.0:9090"));
        assert_eq!(m.verbosity().unwrap(), 2);
        assert!(!m.flag(&INSECURE));
        assert_eq!(
            m.required(&ENDPOINT),
            Err(ArgsError::Required("endpoint".into()))
        );
    }

    #[test]
    fn errors_are_precise() {
        assert_eq!(
            parse(&["--nope"]).unwrap_err(),
            ArgsError::Unknown("--nope".into())
        );
        assert_eq!(parse(&["-x"]).unwrap_err(), ArgsError::Unknown("-x".into()));
        assert_eq!(
            parse(&["--listen"]).unwrap_err(),
            ArgsError::MissingValue("listen".into())
        );
        assert_eq!(
            parse(&["--insecure=1"]).unwrap_err(),
            ArgsError::UnexpectedValue("insecure".into())
        );
        assert_eq!(
            parse(&["x", "--help"]).unwrap_err(),
            ArgsError::HelpRequested
        );
        let m = parse(&["-v", "lots"]).unwrap();
        assert!(matches!(m.verbosity(), Err(ArgsError::Invalid { .. })));
    }

    #[test]
    fn config_file_fills_what_flags_do_not_give() {
        let dir = std::env::temp_dir().join(format!("confboot-args-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("c.json");
        std::fs::write(
            &file,
            r#"{"listen": "10.0.0.1:1", "endpoint": ["a", "b"], "insecure": true, "verbosity": 4}"#,
        )
        .unwrap();
        let mut m = parse(&["-v", "6"]).unwrap();
        m.load_config_file(&file).unwrap();
        assert_eq!(m.value(&LISTEN), Some("10.0.0.1:1"));
        assert_eq!(m.values(&ENDPOINT), vec!["a", "b"]);
        assert!(m.flag(&INSECURE));
        assert_eq!(
            m.verbosity().unwrap(),
            6,
            "the command line wins over the file"
        );
        for bad in [r#"{"nope": 1}"#, "[]", r#"{"listen": {"x": 1}}"#, "{"] {
            std::fs::write(&file, bad).unwrap();
            let mut m = parse(&[]).unwrap();
            assert!(
                matches!(m.load_config_file(&file), Err(ArgsError::Invalid { .. })),
                "{bad}"
            );
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn old_names_still_work_everywhere() {
        let no_env = |_: &str| None;
        for args in [
            &["--policy", "p.json"][..],
            &["--policy=p.json"],
            &["--expected", "p.json"],
            &["--measurements", "p.json"],
        ] {
            let m = CMD
                .parse_with_env(args.iter().map(|s| s.to_string()), no_env)
                .unwrap();
            assert_eq!(m.value(&MEASUREMENTS), Some("p.json"), "{args:?}");
        }
        // The last one given wins, whichever name it used.
        let m = parse(&["--measurements", "a", "--policy", "b"]).unwrap();
        assert_eq!(m.value(&MEASUREMENTS), Some("b"));
        // The environment: the current variable first, then the old one.
        let env = |var: &str| match var {
            "T_MEASUREMENTS" => Some("new.json".to_string()),
            "T_POLICY" => Some("old.json".to_string()),
            _ => None,
        };
        let m = CMD.parse_with_env(Vec::new(), env).unwrap();
        assert_eq!(m.value(&MEASUREMENTS), Some("new.json"));
        let only_old = |var: &str| (var == "T_POLICY").then(|| "old.json".to_string());
        let m = CMD.parse_with_env(Vec::new(), only_old).unwrap();
        assert_eq!(m.value(&MEASUREMENTS), Some("old.json"));
        let m = CMD
            .parse_with_env(["--policy=flag.json".to_string()], env)
            .unwrap();
        assert_eq!(m.value(&MEASUREMENTS), Some("flag.json"), "flags win");
        // A configuration file may use the old key.
        let dir = std::env::temp_dir().join(format!("confboot-args-alias-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("c.json");
        std::fs::write(&file, r#"{"policy": "file.json"}"#).unwrap();
        let mut m = CMD.parse_with_env(Vec::new(), no_env).unwrap();
        m.load_config_file(&file).unwrap();
        assert_eq!(m.value(&MEASUREMENTS), Some("file.json"));
        std::fs::remove_dir_all(&dir).unwrap();
        // An alias is no prefix match: other names stay unknown.
        assert_eq!(
            parse(&["--polic", "x"]).unwrap_err(),
            ArgsError::Unknown("--polic".into())
        );
        // The help names the option by its current name and lists the old ones.
        let h = CMD.help();
        assert!(h.contains("--measurements FILE"), "{h}");
        assert!(h.contains("[formerly: --policy, --expected]"), "{h}");
        assert!(h.contains("[env: T_MEASUREMENTS, T_POLICY]"), "{h}");
    }

    #[test]
    fn an_oversized_config_file_is_refused_naming_the_file_and_the_limit() {
        let dir = std::env::temp_dir().join(format!("confboot-args-big-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("big.json");
        let padding = " ".repeat(crate::fs::MAX_CONFIG_FILE_BYTES as usize);
        std::fs::write(&file, format!(r#"{{"listen": "h:1"}}{padding}"#)).unwrap();
        let mut m = parse(&[]).unwrap();
        match m.load_config_file(&file) {
            Err(ArgsError::Invalid { option, reason, .. }) => {
                assert_eq!(option, "config");
                assert!(
                    reason.contains("big.json")
                        && reason.contains(&crate::fs::MAX_CONFIG_FILE_BYTES.to_string()),
                    "{reason}"
                );
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(m.value(&LISTEN), Some("0.0.0.0:9090"), "nothing was taken");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    #[should_panic(
        expected = "command t reads option --nope, which its option table does not declare"
    )]
    fn reading_an_undeclared_option_names_the_command_and_the_option() {
        const NOPE: Opt = Opt::value("nope", "X", "Not an option of t");
        let m = parse(&[]).unwrap();
        assert!(!CMD.declares(&NOPE));
        let _ = m.value(&NOPE);
    }

    #[test]
    #[should_panic(expected = "command t reads option --listen as")]
    fn reading_an_option_declared_differently_is_refused_too() {
        const OTHER_LISTEN: Opt = Opt::value("listen", "ADDR", "Where to listen").default("h:1");
        let m = parse(&[]).unwrap();
        assert!(CMD.declares(&LISTEN) && !CMD.declares(&OTHER_LISTEN));
        let _ = m.value(&OTHER_LISTEN);
    }

    #[test]
    fn a_misspelt_option_names_the_nearest_one() {
        let e = parse(&["--measurments", "m.json"]).unwrap_err();
        assert_eq!(
            e,
            ArgsError::Misspelt {
                given: "--measurments".into(),
                nearest: "measurements"
            }
        );
        assert_eq!(
            e.to_string(),
            "unknown option --measurments; did you mean --measurements?"
        );
        // A swap of two letters, a letter too many, one missing.
        for (given, want) in [
            ("--lsiten", "listen"),
            ("--insecuure", "insecure"),
            ("--endpont=a", "endpoint"),
            ("--hlep", "help"),
        ] {
            match parse(&[given]).unwrap_err() {
                ArgsError::Misspelt { nearest, .. } => assert_eq!(nearest, want, "{given}"),
                other => panic!("{given}: {other:?}"),
            }
        }
        assert_eq!(
            parse(&["--zzzzzz"]).unwrap_err(),
            ArgsError::Unknown("--zzzzzz".into())
        );
    }

    #[test]
    fn nearest_is_near_or_nothing() {
        let known = ["init", "recover", "verify", "verify-report", "verify-quote"];
        assert_eq!(nearest("veirfy", known), Some("verify"));
        assert_eq!(nearest("verify-reprot", known), Some("verify-report"));
        assert_eq!(nearest("recovr", known), Some("recover"));
        assert_eq!(nearest("int", known), Some("init"));
        assert_eq!(nearest("deploy", known), None);
        assert_eq!(nearest("", known), None);
        assert_eq!(edit_distance("kitten", "sitting"), 3);
        assert_eq!(edit_distance("ab", "ba"), 1);
        assert_eq!(edit_distance("", "abc"), 3);
        let e = ArgsError::UnknownCommand {
            given: "veirfy".into(),
            nearest: nearest("veirfy", known),
        };
        assert_eq!(
            e.to_string(),
            "unknown command \"veirfy\"; did you mean verify?"
        );
        let m = parse(&["x"]).unwrap();
        assert_eq!(m.no_positional(), Err(ArgsError::Unexpected("x".into())));
        assert_eq!(parse(&[]).unwrap().no_positional(), Ok(()));
    }

    #[test]
    fn help_lists_every_option() {
        let h = CMD.help();
        for o in CMD.opts {
            assert!(h.contains(&format!("--{}", o.long)), "{h}");
        }
        assert!(h.contains("[default: 0.0.0.0:9090]"));
        assert!(h.contains("--help"));
    }
}
