//! nginx as the benchmarks' origin (`splicer-lab nginx-origin`): the static files a real web
//! server sends with `sendfile`, where the lab's origin builds each response in user space.
//! It serves the lab origin's URLs, `/bytes/SIZE?seed=S[&cache=1]`, from one file per size
//! holding the content of one seed, so the s-clients check every byte they get from it as
//! from the lab's origin (for that seed only: the query is not read except for `cache`), and
//! answers `Cache-Control` as the lab's origin does: `public, max-age=3600` with `cache=1`,
//! `no-store` without.
//!
//! The files and the configuration go to a directory of their own, and the command then
//! becomes nginx (`exec`), so the bed's process is nginx's master and stopping it stops
//! nginx.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use crate::content::Pattern;

/// What to serve.
#[derive(Debug, Clone)]
pub struct Params {
    pub listen: SocketAddr,
    /// The sizes to serve, bytes (`/bytes/SIZE`).
    pub sizes: Vec<u64>,
    /// The seed of every file's content.
    pub seed: u64,
}

/// The default directory for an origin listening on `listen`.
pub fn dir_for(listen: SocketAddr) -> PathBuf {
    PathBuf::from(format!(
        "/run/splicer-lab-nginx-origin-{}-{}",
        listen.ip(),
        listen.port()
    ))
}

/// Writes `dir/bytes/SIZE` for each size and `dir/nginx.conf`; returns the configuration's
/// path. Anything in `dir` from an earlier run is replaced.
pub fn prepare(p: &Params, dir: &Path) -> anyhow::Result<PathBuf> {
    if p.sizes.is_empty() {
        anyhow::bail!("--sizes: at least one size");
    }
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir.join("bytes"))?;
    let pattern = Pattern::new(p.seed);
    for size in &p.sizes {
        let mut file = std::io::BufWriter::new(std::fs::File::create(
            dir.join("bytes").join(size.to_string()),
        )?);
        let mut failed = None;
        pattern.feed(*size, |piece| {
            if failed.is_none() {
                failed = std::io::Write::write_all(&mut file, piece).err();
            }
        });
        if let Some(e) = failed {
            return Err(e.into());
        }
        std::io::Write::flush(&mut file)?;
    }
    let conf = dir.join("nginx.conf");
    std::fs::write(&conf, config(p.listen, dir))?;
    Ok(conf)
}

/// nginx's configuration: as the benchmarks' other nginx (`worker_processes auto`, no access
/// log, kept-alive connections never closed for their count), files by `sendfile`.
fn config(listen: SocketAddr, dir: &Path) -> String {
    let d = dir.display();
    format!(
        "daemon off;\nworker_processes auto;\npid {d}/nginx.pid;\nerror_log stderr;\n\
         events {{ worker_connections 4096; }}\n\
         http {{\n  access_log off;\n  keepalive_requests 100000000;\n  sendfile on;\n  \
         tcp_nopush on;\n  default_type application/octet-stream;\n  \
         map $arg_cache $cache_control {{ \"1\" \"public, max-age=3600\"; default \"no-store\"; }}\n  \
         server {{\n    listen {listen} backlog=4096;\n    root {d};\n    \
         location /bytes/ {{ add_header Cache-Control $cache_control; }}\n  }}\n}}\n"
    )
}

/// Writes the files and becomes nginx; returns only if nginx could not start.
pub fn exec(p: &Params) -> anyhow::Error {
    use std::os::unix::process::CommandExt;
    let dir = dir_for(p.listen);
    match prepare(p, &dir) {
        Ok(conf) => {
            let e = std::process::Command::new("nginx")
                .arg("-c")
                .arg(conf)
                .args(["-e", "stderr"])
                .exec();
            anyhow::anyhow!("nginx: {e} (scripts/setup.sh installs nginx-light)")
        }
        Err(e) => e.context(format!("writing {}", dir.display())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_files_hold_the_seed_s_content_and_the_configuration_names_them() {
        let dir = std::env::temp_dir().join(format!("nginx-origin-unit-{}", std::process::id()));
        let p = Params {
            listen: "127.0.0.1:18080".parse().unwrap(),
            sizes: vec![10, (1 << 20) + 100],
            seed: 5,
        };
        let conf = prepare(&p, &dir).unwrap();
        let small = std::fs::read(dir.join("bytes/10")).unwrap();
        assert_eq!(small, Pattern::new(5).bytes(10));
        let big = std::fs::read(dir.join("bytes").join(((1u64 << 20) + 100).to_string())).unwrap();
        assert_eq!(big, Pattern::new(5).bytes((1 << 20) + 100));
        let text = std::fs::read_to_string(conf).unwrap();
        assert!(
            text.contains("listen 127.0.0.1:18080 backlog=4096;"),
            "{text}"
        );
        assert!(text.contains(&format!("root {};", dir.display())));
        assert!(text.contains("\"1\" \"public, max-age=3600\"; default \"no-store\";"));
        assert!(prepare(&Params { sizes: vec![], ..p }, &dir).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
