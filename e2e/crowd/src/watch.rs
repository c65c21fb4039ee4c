//! What the report reads of the processes: peak resident memory, and their `/metrics`.

/// Peak resident memory (`VmHWM`) of process `pid`, MiB; `None` when it cannot be read.
pub fn peak_rss_mib(pid: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib.div_ceil(1024))
}

/// The `seckill_*` samples of a Prometheus text endpoint (empty when it does not answer).
pub async fn scrape(url: &str) -> Vec<String> {
    let client = reqwest::Client::builder().timeout(std::time::Duration::from_secs(3)).build();
    let Ok(client) = client else { return Vec::new() };
    let Ok(r) = client.get(url).send().await else { return Vec::new() };
    let text = r.text().await.unwrap_or_default();
    text.lines().filter(|l| l.starts_with("seckill_")).map(str::to_string).collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn this_process_has_a_peak_rss() {
        let mib = super::peak_rss_mib(&std::process::id().to_string());
        assert!(mib.is_some_and(|m| m > 0), "{mib:?}");
        assert_eq!(super::peak_rss_mib("not-a-pid"), None);
    }
}
