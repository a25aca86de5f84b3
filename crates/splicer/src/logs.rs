//! Where the log and the access lines go: standard error or files, the access lines apart
//! when `log.access_file` is set, in `text`, `json`, Squid's or the combined format, and the
//! files reopened on SIGUSR2 so that logrotate can move them away (`create` mode, as with
//! nginx's USR1; `copytruncate` needs no signal).

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use anyhow::Context;
use splicer_proxy::config::{AccessFormat, LogFormat};
use splicer_proxy::Config;
use tracing_subscriber::filter::{filter_fn, EnvFilter};
use tracing_subscriber::fmt::writer::BoxMakeWriter;
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{Layer, Registry};

use crate::access_line::AccessLayer;

/// The target of the access lines (`splicer_proxy::access`).
const ACCESS: &str = "access";

/// A log file, appended to; [`LogFile::reopen`] swaps in the file now at its path.
pub struct LogFile {
    path: PathBuf,
    file: RwLock<Arc<File>>,
}

impl LogFile {
    fn open(path: &Path) -> io::Result<Arc<LogFile>> {
        Ok(Arc::new(LogFile {
            path: path.to_path_buf(),
            file: RwLock::new(Arc::new(open_append(path)?)),
        }))
    }

    /// Opens the file at the path again (created if it was moved away); lines written
    /// meanwhile go to the old one. On failure the old one stays.
    pub fn reopen(&self) -> io::Result<()> {
        let new = Arc::new(open_append(&self.path)?);
        *self.file.write().unwrap_or_else(|e| e.into_inner()) = new;
        Ok(())
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

fn open_append(path: &Path) -> io::Result<File> {
    // Readable by the owner's group (an `adm` group reading logs), not by everyone: access
    // lines name users and URLs.
    OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o640)
        .open(path)
}

/// One line's writer: the file at the moment the line is written. Each line reaches the
/// file in one `write` (the formatter hands over a whole line), which `O_APPEND` keeps
/// whole among threads.
pub struct FileWriter(Arc<File>);

impl Write for FileWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        (&*self.0).write(buf)
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// A shared [`LogFile`] as the formatters' writer.
#[derive(Clone)]
pub struct Handle(pub Arc<LogFile>);

impl<'a> MakeWriter<'a> for Handle {
    type Writer = FileWriter;
    fn make_writer(&'a self) -> FileWriter {
        FileWriter(
            self.0
                .file
                .read()
                .unwrap_or_else(|e| e.into_inner())
                .clone(),
        )
    }
}

/// The files the logger writes, to be reopened on SIGUSR2 (and SIGHUP).
#[derive(Clone)]
pub struct Files(Vec<Arc<LogFile>>);

impl Files {
    /// Reopens every file; logs each failure (the old file is kept).
    pub fn reopen(&self) {
        for f in &self.0 {
            match f.reopen() {
                Ok(()) => tracing::info!(file = %f.path().display(), "log file reopened"),
                Err(e) => tracing::error!(
                    file = %f.path().display(),
                    "cannot reopen the log file ({e}); still writing to the one open before"
                ),
            }
        }
    }
}

type Boxed = Box<dyn Layer<Registry> + Send + Sync>;

/// Sets the global logger up from `[log]`; `RUST_LOG`, when set, overrides the level.
pub fn init(config: &Config) -> anyhow::Result<Files> {
    let log = &config.log;
    let mut filter = EnvFilter::try_from_default_env()
        .or_else(|_| EnvFilter::try_new(&log.level))
        .map_err(|e| anyhow::anyhow!("log.level: {e}"))?;
    let mut files = Vec::new();
    let mut open = |path: &Path| -> anyhow::Result<Handle> {
        let f = LogFile::open(path)
            .with_context(|| format!("cannot open the log file {}", path.display()))?;
        files.push(f.clone());
        Ok(Handle(f))
    };
    // Colour codes only on a terminal: a log redirected to a file or a pipe stays plain.
    use std::io::IsTerminal;
    let (writer, ansi) = match &log.file {
        Some(path) => (BoxMakeWriter::new(open(path)?), false),
        None => (BoxMakeWriter::new(io::stderr), io::stderr().is_terminal()),
    };
    let access = match &log.access_file {
        Some(path) => {
            // The access lines leave the log for their own file.
            filter = filter.add_directive(
                format!("{ACCESS}=off")
                    .parse()
                    .context("the access lines' filter")?,
            );
            Some(access_layer(open(path)?, log.access_format()))
        }
        None => None,
    };
    let main = fmt_layer(log.format == LogFormat::Json, ansi, writer, filter);
    let mut layers = vec![main];
    layers.extend(access);
    tracing_subscriber::registry().with(layers).try_init()?;
    Ok(Files(files))
}

/// The layer writing access lines to their own file, in `format`, whatever the log's level.
fn access_layer(writer: Handle, format: AccessFormat) -> Boxed {
    let only_access = filter_fn(|m| m.target() == ACCESS);
    match format {
        AccessFormat::Text => fmt_layer(false, false, writer, only_access),
        AccessFormat::Json => fmt_layer(true, false, writer, only_access),
        AccessFormat::Squid | AccessFormat::Combined => AccessLayer::new(writer, format)
            .with_filter(only_access)
            .boxed(),
    }
}

/// `tracing`'s own formatter, text (`ansi`: with colour codes) or JSON lines, writing to
/// `writer` what `filter` lets through.
fn fmt_layer<W, F>(json: bool, ansi: bool, writer: W, filter: F) -> Boxed
where
    W: for<'w> tracing_subscriber::fmt::MakeWriter<'w> + Send + Sync + 'static,
    F: tracing_subscriber::layer::Filter<Registry> + Send + Sync + 'static,
{
    match json {
        false => tracing_subscriber::fmt::layer()
            .with_ansi(ansi)
            .with_writer(writer)
            .with_filter(filter)
            .boxed(),
        true => tracing_subscriber::fmt::layer()
            .json()
            .flatten_event(true)
            .with_writer(writer)
            .with_filter(filter)
            .boxed(),
    }
}
