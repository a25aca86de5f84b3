//! `splicer man`: the man page, generated from the command line (its commands, their
//! arguments and help), with the sections an operator looks for after them: files,
//! signals, exit status. The Debian package installs it as `splicer(1)`.

use clap::CommandFactory;
use roff::{bold, italic, roman, Roff};

/// The man page, in roff.
pub fn render<C: CommandFactory>() -> std::io::Result<Vec<u8>> {
    let mut cmd = C::command();
    cmd.build();
    let man = clap_mangen::Man::new(cmd.clone());
    let mut out = Vec::new();
    man.render_title(&mut out)?;
    man.render_name_section(&mut out)?;
    man.render_synopsis_section(&mut out)?;
    man.render_description_section(&mut out)?;
    man.render_options_section(&mut out)?;
    let mut roff = Roff::new();
    roff.control("SH", ["COMMANDS"]);
    for sub in cmd
        .get_subcommands()
        .filter(|s| !s.is_hide_set() && s.get_name() != "help")
    {
        commands(&mut roff, sub);
    }
    sections(&mut roff);
    roff.to_writer(&mut out)?;
    man.render_version_section(&mut out)?;
    Ok(out)
}

/// A command: its usage line, its help, and each argument's.
fn commands(roff: &mut Roff, sub: &clap::Command) {
    let mut usage = vec![bold(format!("splicer {}", sub.get_name()))];
    for arg in sub.get_arguments().filter(|a| !a.is_hide_set()) {
        let Some(long) = arg.get_long() else { continue };
        if long == "help" {
            continue;
        }
        let value = arg
            .get_value_names()
            .and_then(|v| v.first())
            .map_or("FILE".to_string(), |v| v.to_string());
        usage.push(roman(if arg.is_required_set() { " " } else { " [" }));
        usage.push(bold(format!("--{long}")));
        usage.push(roman(" "));
        usage.push(italic(value));
        if !arg.is_required_set() {
            usage.push(roman("]"));
        }
    }
    roff.control("TP", []).text(usage);
    let help = sub
        .get_long_about()
        .or(sub.get_about())
        .map(ToString::to_string)
        .unwrap_or_default();
    roff.text([roman(help)]);
}

/// What the command line cannot say: files, signals, exit status, where to read more.
fn sections(roff: &mut Roff) {
    roff.control("SH", ["FILES"]);
    for (file, what) in [
        (
            "/etc/splicer/splicer.toml",
            "the configuration the service runs with (every key: configuration.md)",
        ),
        (
            "/lib/systemd/system/splicer.service",
            "the systemd unit: user splicer, the kernel engines' capabilities only",
        ),
        (
            "/var/log/splicer/",
            "where [log] file and access_file may write under the unit",
        ),
        (
            "/var/lib/splicer/",
            "where a [cache] disk tier may live under the unit",
        ),
        (
            "/usr/share/splicer/grafana/splicer.json",
            "a Grafana dashboard of the metrics [admin] serves",
        ),
    ] {
        roff.control("TP", []).text([bold(file)]);
        roff.text([roman(what)]);
    }
    roff.control("SH", ["SIGNALS"]);
    for (signal, what) in [
        (
            "SIGTERM, SIGINT",
            "stop accepting, let open connections finish within limits.shutdown_grace, exit",
        ),
        (
            "SIGUSR1",
            "log the relay's counters per engine (also at /metrics with [admin])",
        ),
        ("SIGUSR2", "reopen the log files (logrotate's postrotate)"),
        (
            "SIGHUP",
            "read the configuration file again and swap it in without dropping a connection \
             (a file with a mistake is refused, the running one kept); reopen the log files; \
             systemctl reload sends it",
        ),
    ] {
        roff.control("TP", []).text([bold(signal)]);
        roff.text([roman(what)]);
    }
    roff.control("SH", ["EXIT STATUS"]);
    roff.text([roman(
        "0 after a stop by signal, or a configuration check that passed; 1 when the \
         configuration is refused (every problem is printed, each with its key and line), \
         a listener cannot be bound, or a log file cannot be opened.",
    )]);
    roff.control("SH", ["SEE ALSO"]);
    roff.text([roman(
        "/usr/share/doc/splicer/: README, operations.md (deploying, monitoring, logs, \
         signals), configuration.md (every key), engines.md (how each relay engine moves \
         bytes).",
    )]);
}
