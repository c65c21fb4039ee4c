//! Content-Type by extension: Nginx's `mime.types` as Debian ships it (the same table the
//! stock `nginx.conf` includes), lowercase extensions, sorted for a binary search.

/// (extension, type), sorted by extension.
const TYPES: [(&str, &str); 110] = [
    ("3gp", "video/3gpp"),
    ("3gpp", "video/3gpp"),
    ("7z", "application/x-7z-compressed"),
    ("ai", "application/postscript"),
    ("asf", "video/x-ms-asf"),
    ("asx", "video/x-ms-asf"),
    ("atom", "application/atom+xml"),
    ("avi", "video/x-msvideo"),
    ("avif", "image/avif"),
    ("bin", "application/octet-stream"),
    ("bmp", "image/x-ms-bmp"),
    ("cco", "application/x-cocoa"),
    ("crt", "application/x-x509-ca-cert"),
    ("css", "text/css"),
    ("deb", "application/octet-stream"),
    ("der", "application/x-x509-ca-cert"),
    ("dll", "application/octet-stream"),
    ("dmg", "application/octet-stream"),
    ("doc", "application/msword"),
    ("docx", "application/vnd.openxmlformats-officedocument.wordprocessingml.document"),
    ("ear", "application/java-archive"),
    ("eot", "application/vnd.ms-fontobject"),
    ("eps", "application/postscript"),
    ("exe", "application/octet-stream"),
    ("flv", "video/x-flv"),
    ("gif", "image/gif"),
    ("hqx", "application/mac-binhex40"),
    ("htc", "text/x-component"),
    ("htm", "text/html"),
    ("html", "text/html"),
    ("ico", "image/x-icon"),
    ("img", "application/octet-stream"),
    ("iso", "application/octet-stream"),
    ("jad", "text/vnd.sun.j2me.app-descriptor"),
    ("jar", "application/java-archive"),
    ("jardiff", "application/x-java-archive-diff"),
    ("jng", "image/x-jng"),
    ("jnlp", "application/x-java-jnlp-file"),
    ("jpeg", "image/jpeg"),
    ("jpg", "image/jpeg"),
    ("js", "application/javascript"),
    ("json", "application/json"),
    ("kar", "audio/midi"),
    ("kml", "application/vnd.google-earth.kml+xml"),
    ("kmz", "application/vnd.google-earth.kmz"),
    ("m3u8", "application/vnd.apple.mpegurl"),
    ("m4a", "audio/x-m4a"),
    ("m4v", "video/x-m4v"),
    ("mid", "audio/midi"),
    ("midi", "audio/midi"),
    ("mml", "text/mathml"),
    ("mng", "video/x-mng"),
    ("mov", "video/quicktime"),
    ("mp3", "audio/mpeg"),
    ("mp4", "video/mp4"),
    ("mpeg", "video/mpeg"),
    ("mpg", "video/mpeg"),
    ("msi", "application/octet-stream"),
    ("msm", "application/octet-stream"),
    ("msp", "application/octet-stream"),
    ("odg", "application/vnd.oasis.opendocument.graphics"),
    ("odp", "application/vnd.oasis.opendocument.presentation"),
    ("ods", "application/vnd.oasis.opendocument.spreadsheet"),
    ("odt", "application/vnd.oasis.opendocument.text"),
    ("ogg", "audio/ogg"),
    ("pdb", "application/x-pilot"),
    ("pdf", "application/pdf"),
    ("pem", "application/x-x509-ca-cert"),
    ("pl", "application/x-perl"),
    ("pm", "application/x-perl"),
    ("png", "image/png"),
    ("ppt", "application/vnd.ms-powerpoint"),
    ("pptx", "application/vnd.openxmlformats-officedocument.presentationml.presentation"),
    ("prc", "application/x-pilot"),
    ("ps", "application/postscript"),
    ("ra", "audio/x-realaudio"),
    ("rar", "application/x-rar-compressed"),
    ("rpm", "application/x-redhat-package-manager"),
    ("rss", "application/rss+xml"),
    ("rtf", "application/rtf"),
    ("run", "application/x-makeself"),
    ("sea", "application/x-sea"),
    ("shtml", "text/html"),
    ("sit", "application/x-stuffit"),
    ("svg", "image/svg+xml"),
    ("svgz", "image/svg+xml"),
    ("swf", "application/x-shockwave-flash"),
    ("tcl", "application/x-tcl"),
    ("tif", "image/tiff"),
    ("tiff", "image/tiff"),
    ("tk", "application/x-tcl"),
    ("ts", "video/mp2t"),
    ("txt", "text/plain"),
    ("war", "application/java-archive"),
    ("wasm", "application/wasm"),
    ("wbmp", "image/vnd.wap.wbmp"),
    ("webm", "video/webm"),
    ("webp", "image/webp"),
    ("wml", "text/vnd.wap.wml"),
    ("wmlc", "application/vnd.wap.wmlc"),
    ("wmv", "video/x-ms-wmv"),
    ("woff", "font/woff"),
    ("woff2", "font/woff2"),
    ("xhtml", "application/xhtml+xml"),
    ("xls", "application/vnd.ms-excel"),
    ("xlsx", "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"),
    ("xml", "text/xml"),
    ("xpi", "application/x-xpinstall"),
    ("xspf", "application/xspf+xml"),
    ("zip", "application/zip"),
];

/// The type of `path`'s extension (after the last `.` of its last segment, any case), as
/// Nginx's `types`; `None` when the table has none (the route's `default_type` then).
pub fn by_extension(path: &str) -> Option<&'static str> {
    let name = path.rsplit('/').next().unwrap_or(path);
    let (_, ext) = name.rsplit_once('.')?;
    let ext = ext.to_ascii_lowercase();
    TYPES.binary_search_by(|(e, _)| (*e).cmp(ext.as_str())).ok().map(|i| TYPES[i].1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn types_by_extension_as_nginx() {
        assert!(TYPES.windows(2).all(|w| w[0].0 < w[1].0), "sorted, each extension once");
        assert_eq!(by_extension("/a/b.HTML"), Some("text/html"));
        assert_eq!(by_extension("/app.js"), Some("application/javascript"));
        assert_eq!(by_extension("/s.css"), Some("text/css"));
        assert_eq!(by_extension("/i.png"), Some("image/png"));
        assert_eq!(by_extension("/f.woff2"), Some("font/woff2"));
        assert_eq!(by_extension("/x.tar.gz"), None);
        assert_eq!(by_extension("/a.b/readme"), None, "the dot of a folder is not an extension");
        assert_eq!(by_extension("/noext"), None);
    }
}
