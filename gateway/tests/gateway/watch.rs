//! The configuration's directory is watched: a Kubernetes ConfigMap update (a new
//! timestamped folder, `..data` renamed onto it) reloads --rls-config and --config by
//! itself; a broken file is refused and the running configuration stays.

use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};

use redis_rl_testkit::{eventually, Server};

use super::rls::{limit_of, metrics, start_watched};
use super::test_dir;

/// A directory laid out as the kubelet mounts a ConfigMap: `..<version>/` holds the
/// files, `..data` points at it, and each file is `name -> ..data/name`.
struct ConfigMap {
    dir: PathBuf,
    version: u32,
}

impl ConfigMap {
    fn new(dir: PathBuf, files: &[(&str, &str)]) -> ConfigMap {
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let mut map = ConfigMap { dir, version: 0 };
        map.update(files);
        for (name, _) in files {
            symlink(Path::new("..data").join(name), map.dir.join(name)).unwrap();
        }
        map
    }

    fn folder(&self, version: u32) -> PathBuf {
        self.dir
            .join(format!("..2026_12_05_10_00_0{version}.123456789"))
    }

    /// What the kubelet's atomic writer does: a new folder, a temporary symlink to it
    /// renamed over `..data` (atomic), then the old folder removed.
    fn update(&mut self, files: &[(&str, &str)]) {
        let old = self.folder(self.version);
        self.version += 1;
        let new = self.folder(self.version);
        std::fs::create_dir(&new).unwrap();
        for (name, text) in files {
            std::fs::write(new.join(name), text).unwrap();
        }
        let tmp = self.dir.join("..data_tmp");
        symlink(new.file_name().unwrap(), &tmp).unwrap();
        std::fs::rename(&tmp, self.dir.join("..data")).unwrap();
        let _ = std::fs::remove_dir_all(old);
    }
}

fn rls_yaml(requests_per_unit: &str) -> String {
    format!("domain: w\ndescriptors:\n  - key: k\n    rate_limit: {{unit: hour, requests_per_unit: {requests_per_unit}}}\n")
}

/// A limit high enough that the polls of the test never use it up.
fn toml(limit: u32) -> String {
    format!("dimensions = [\"endpoint\"]\n[endpoint]\nlimit = {limit}\n")
}

#[tokio::test]
async fn a_configmap_update_reloads_both_configurations_and_a_broken_one_is_refused() {
    let server = Server::start();
    let base = test_dir("watch", server.port);
    let mut rls_map = ConfigMap::new(base.join("rls"), &[("rl.yaml", &rls_yaml("5"))]);
    let mut gw_map = ConfigMap::new(base.join("gw"), &[("gateway.toml", &toml(1000))]);
    let config = gw_map.dir.join("gateway.toml");
    let mut rls = start_watched(
        &server,
        &rls_map.dir,
        &["--config", config.to_str().unwrap()],
        true,
    )
    .await;
    let k = [("k", "v")];
    assert_eq!(limit_of(&rls.one("w", &k, 0).await), Some((5, 3)));
    let (_, h, _) = rls.gw.get("/api/search", &[]).await.unwrap();
    assert_eq!(h["x-ratelimit-limit"], "1000");

    // No SIGHUP: the swap alone is seen (within eventually's 10 s; a second or less on
    // an idle machine).
    rls_map.update(&[("rl.yaml", &rls_yaml("7"))]);
    gw_map.update(&[("gateway.toml", &toml(2000))]);
    eventually(
        "the new rate limit service configuration applies",
        async || limit_of(&rls.one("w", &k, 0).await) == Some((7, 3)),
    )
    .await;
    eventually("the new gateway configuration applies", async || {
        let (_, h, _) = rls.gw.get("/api/search", &[]).await.unwrap();
        h["x-ratelimit-limit"] == "2000"
    })
    .await;

    // Broken files: refused, counted, the running configurations stay.
    rls_map.update(&[("rl.yaml", &rls_yaml("lots"))]);
    gw_map.update(&[("gateway.toml", "[endpoint]\nlimit = 0\n")]);
    eventually(
        "the broken rate limit service file is refused",
        async || {
            metrics(&rls)
                .await
                .contains("rl_rls_config_reloads_total{result=\"error\"}")
        },
    )
    .await;
    eventually("the broken gateway file is refused", async || {
        rls.gw.health().await["config"]["reloads_refused"] != 0
    })
    .await;
    assert_eq!(limit_of(&rls.one("w", &k, 0).await), Some((7, 3)));
    let (status, h, _) = rls.gw.get("/api/search", &[]).await.unwrap();
    assert_eq!(status, 200);
    assert_eq!(h["x-ratelimit-limit"], "2000");

    // Fixed again: picked up again.
    rls_map.update(&[("rl.yaml", &rls_yaml("9"))]);
    eventually("the fixed file applies", async || {
        limit_of(&rls.one("w", &k, 0).await) == Some((9, 3))
    })
    .await;
    drop(rls);
    let _ = std::fs::remove_dir_all(&base);
}

#[tokio::test]
async fn a_file_written_in_place_is_reloaded_and_no_watch_turns_it_off() {
    let server = Server::start();
    let base = test_dir("watch-file", server.port);
    let file = base.join("rl.yaml");
    std::fs::write(&file, rls_yaml("5")).unwrap();
    let k = [("k", "v")];
    let mut watched = start_watched(&server, &file, &[], true).await;
    let mut unwatched = start_watched(&server, &file, &["--no-watch"], true).await;
    std::fs::write(&file, rls_yaml("6")).unwrap();
    eventually("the file's new limit applies", async || {
        limit_of(&watched.one("w", &k, 0).await) == Some((6, 3))
    })
    .await;
    // The watched gateway saw the change; the other, told not to watch, did not (and its
    // SIGHUP still reloads).
    assert_eq!(limit_of(&unwatched.one("w", &k, 0).await), Some((5, 3)));
    unwatched.gw.hangup();
    eventually("SIGHUP reloads", async || {
        limit_of(&unwatched.one("w", &k, 0).await) == Some((6, 3))
    })
    .await;
    let _ = std::fs::remove_dir_all(&base);
}
