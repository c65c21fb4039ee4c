//! What a process holds, read from `/proc`: resident memory, open descriptors, threads, and its
//! established TCP connections by the remote port (the socket inodes of `/proc/<pid>/fd` found in
//! `/proc/net/tcp` and `tcp6`).

use std::collections::{BTreeMap, HashSet};

/// One process's figures at one instant.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Held {
    /// Resident memory (`VmRSS`), MiB.
    pub rss_mib: f64,
    /// Open file descriptors.
    pub fds: f64,
    /// Threads.
    pub threads: f64,
    /// Established TCP connections by remote port.
    pub conns: BTreeMap<u16, f64>,
}

/// The figures of process `pid`, or `None` when it is gone.
pub fn held(pid: u32) -> Option<Held> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |name: &str| -> Option<f64> {
        let line = status.lines().find(|l| l.starts_with(name))?;
        line.split_whitespace().nth(1)?.parse().ok()
    };
    let mut inodes = HashSet::new();
    let mut fds = 0.0;
    for entry in std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?.flatten() {
        fds += 1.0;
        if let Ok(target) = std::fs::read_link(entry.path()) {
            if let Some(inode) = socket_inode(&target.to_string_lossy()) {
                inodes.insert(inode);
            }
        }
    }
    let mut conns = BTreeMap::new();
    for table in ["tcp", "tcp6"] {
        let text = std::fs::read_to_string(format!("/proc/{pid}/net/{table}")).unwrap_or_default();
        for (port, inode) in established(&text) {
            if inodes.contains(&inode) {
                *conns.entry(port).or_insert(0.0) += 1.0;
            }
        }
    }
    Some(Held { rss_mib: field("VmRSS:")? / 1024.0, fds, threads: field("Threads:")?, conns })
}

/// The inode of an fd link's target `socket:[12345]`.
fn socket_inode(target: &str) -> Option<u64> {
    target.strip_prefix("socket:[")?.strip_suffix(']')?.parse().ok()
}

/// The established connections of a `/proc/net/tcp` table: (remote port, socket inode).
fn established(table: &str) -> Vec<(u16, u64)> {
    table
        .lines()
        .skip(1)
        .filter_map(|line| {
            let cols: Vec<&str> = line.split_whitespace().collect();
            // sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
            if cols.len() < 10 || cols[3] != "01" {
                return None;
            }
            let port = u16::from_str_radix(cols[2].rsplit(':').next()?, 16).ok()?;
            Some((port, cols[9].parse().ok()?))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn established_rows_give_their_remote_port_and_inode() {
        let table = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n\
           0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 111 1\n\
           1: 0100007F:A1B2 0100007F:18F6 01 00000000:00000000 00:00000000 00000000  1000        0 222 1\n\
           2: 0100007F:A1B3 0100007F:18F6 06 00000000:00000000 00:00000000 00000000  1000        0 0 1\n";
        assert_eq!(established(table), vec![(0x18F6, 222)]);
        assert_eq!(socket_inode("socket:[222]"), Some(222));
        assert_eq!(socket_inode("/dev/null"), None);
    }

    #[test]
    fn this_process_has_memory_descriptors_and_a_connection_it_opened() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let _client = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        let _server = listener.accept().unwrap();
        let held = held(std::process::id()).expect("this process");
        assert!(held.rss_mib > 0.0 && held.fds >= 3.0 && held.threads >= 1.0, "{held:?}");
        assert_eq!(held.conns.get(&port), Some(&1.0), "{held:?}");
        assert_eq!(super::held(u32::MAX), None);
    }
}
