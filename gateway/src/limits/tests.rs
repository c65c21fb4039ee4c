use super::*;

fn head(lines: &[&str]) -> Vec<u8> {
    let mut s = lines.join("\r\n");
    s.push_str("\r\n\r\n");
    s.into_bytes()
}

#[test]
fn the_end_of_a_head_is_found_with_crlf_or_lf_and_not_before() {
    assert_eq!(head_end(b"GET / HTTP/1.1\r\nHost: a\r\n\r\nbody"), Some(27));
    assert_eq!(head_end(b"GET / HTTP/1.1\nHost: a\n\nbody"), Some(24));
    assert_eq!(head_end(b"\r\n\r\nGET / HTTP/1.1\r\n\r\n"), Some(22), "leading empty lines are skipped");
    assert_eq!(head_end(b"GET / HTTP/1.1\r\nHost: a\r\n"), None);
    assert_eq!(head_end(b"GET / HTTP/1.1\r\nHost: a\r\n\r"), None);
    assert_eq!(head_end(b"\r\n"), None);
    assert_eq!(head_end(b""), None);
}

#[test]
fn a_clean_head_passes() {
    let h = head(&[
        "POST /x?y=1 HTTP/1.1",
        "Host: shop",
        "Content-Length: 3",
        "X-Tab: a\tb",
        "X-Utf8: caf\u{e9}",
    ]);
    assert_eq!(check_head(&h, 100), Ok(()));
    let chunked = head(&["POST / HTTP/1.1", "Transfer-Encoding: chunked"]);
    assert_eq!(check_head(&chunked, 100), Ok(()));
}

#[test]
fn smuggling_and_control_characters_are_refused_with_400() {
    let cases: [(Vec<u8>, &str); 7] = [
        (head(&["POST / HTTP/1.1", "Content-Length: 5", "Transfer-Encoding: chunked"]), "smuggling"),
        (head(&["POST / HTTP/1.1", "transfer-encoding: chunked", "CONTENT-LENGTH: 5"]), "smuggling"),
        (head(&["GET / HTTP/1.1", "X-A: a\u{1}b"]), "header value"),
        (head(&["GET / HTTP/1.1", "X-A: a\u{7f}"]), "header value"),
        (head(&["GET / HTTP/1.1", "X A: b"]), "header name"),
        (head(&["GET / HTTP/1.1", "X-A: a", " folded"]), "folding"),
        (head(&["GET /\u{0} HTTP/1.1", "Host: a"]), "request line"),
    ];
    for (h, words) in cases {
        let r = check_head(&h, 100).unwrap_err();
        assert_eq!(r.code, Code::BadRequest, "{}", String::from_utf8_lossy(&h));
        assert!(r.message.contains(words), "{} for {}", r.message, String::from_utf8_lossy(&h));
    }
    let bare_cr = b"GET / HTTP/1.1\r\nX-A: a\rb\r\n\r\n";
    assert_eq!(check_head(bare_cr, 100).unwrap_err().code, Code::BadRequest);
    let no_colon = head(&["GET / HTTP/1.1", "nonsense"]);
    assert_eq!(check_head(&no_colon, 100).unwrap_err().code, Code::BadRequest);
}

#[test]
fn too_many_fields_is_431() {
    let mut lines = vec!["GET / HTTP/1.1".to_string()];
    lines.extend((0..5).map(|i| format!("X-{i}: v")));
    let refs: Vec<&str> = lines.iter().map(String::as_str).collect();
    assert_eq!(check_head(&head(&refs), 5), Ok(()));
    assert_eq!(check_head(&head(&refs), 4).unwrap_err().code, Code::HeadersTooLarge);
}

fn req(fields: &[(&str, &str)]) -> RequestHeader {
    let mut r = RequestHeader::build("POST", b"/x", None).unwrap();
    for (n, v) in fields {
        r.append_header(n.to_string(), *v).unwrap();
    }
    r
}

#[test]
fn parsed_fields_are_bounded_by_count_and_size() {
    let limits = Limits { max_headers: 2, max_header_bytes: 200, ..Limits::default() };
    assert_eq!(check_fields(&req(&[("a", "1"), ("b", "2")]), &limits), Ok(()));
    let three = req(&[("a", "1"), ("b", "2"), ("c", "3")]);
    assert_eq!(check_fields(&three, &limits).unwrap_err().code, Code::HeadersTooLarge);
    let big = "v".repeat(200);
    assert_eq!(check_fields(&req(&[("a", &big)]), &limits).unwrap_err().code, Code::HeadersTooLarge);
    let both = req(&[("content-length", "1"), ("transfer-encoding", "chunked")]);
    assert_eq!(check_fields(&both, &limits).unwrap_err().code, Code::BadRequest);
}

#[test]
fn a_field_given_twice_where_one_is_read_is_refused() {
    let two_hosts = head(&["GET / HTTP/1.1", "Host: www.shop", "host: admin.shop"]);
    assert_eq!(
        check_head(&two_hosts, 100).unwrap_err().message,
        "two Host headers: the request is ambiguous"
    );
    let two_lengths = head(&["POST / HTTP/1.1", "Host: a", "Content-Length: 2", "CONTENT-LENGTH: 2"]);
    assert!(check_head(&two_lengths, 100).unwrap_err().message.contains("Content-Length"));
    let limits = Limits::default();
    assert!(check_fields(&req(&[("host", "a"), ("host", "b")]), &limits).is_err());
    assert_eq!(check_fields(&req(&[("host", "a"), ("x-nonce", "1"), ("x-nonce", "2")]), &limits), Ok(()));
    for name in ["authorization", "x-device-id", "x-timestamp", "x-nonce", "x-signature"] {
        let refusal = check_sale_fields(&req(&[(name, "1"), (name, "1")])).unwrap_err();
        assert_eq!(refusal.code, Code::BadRequest);
        assert!(refusal.message.to_ascii_lowercase().contains(name), "{name}: {}", refusal.message);
        assert_eq!(check_sale_fields(&req(&[(name, "1"), ("x-other", "1"), ("x-other", "2")])), Ok(()));
    }
}

#[test]
fn framing_is_one_decimal_length_or_chunked() {
    for bad in [
        "Content-Length: 5, 5",
        "Content-Length: +5",
        "Content-Length: ",
        "Transfer-Encoding: gzip",
        "Transfer-Encoding: gzip, chunked",
        "Transfer-Encoding: chunked, chunked",
    ] {
        assert_eq!(
            check_head(&head(&["POST / HTTP/1.1", bad]), 100).unwrap_err().code,
            Code::BadRequest,
            "{bad}"
        );
    }
    let twice = head(&["POST / HTTP/1.1", "Transfer-Encoding: chunked", "Transfer-Encoding: chunked"]);
    assert_eq!(check_head(&twice, 100).unwrap_err().code, Code::BadRequest);
    assert_eq!(check_head(&head(&["POST / HTTP/1.1", "Content-Length:  12 "]), 100), Ok(()));
    assert_eq!(check_head(&head(&["POST / HTTP/1.1", "Transfer-Encoding: Chunked"]), 100), Ok(()));
}

#[test]
fn bytes_past_a_request_are_a_pipelined_one() {
    assert!(!pipelined(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n"));
    assert!(pipelined(b"GET / HTTP/1.1\r\nHost: a\r\n\r\nGET / HTTP/1.1\r\n"));
    assert!(!pipelined(b"POST / HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}"));
    assert!(!pipelined(b"POST / HTTP/1.1\r\nContent-Length: 4\r\n\r\n{}"), "the rest of the body is to come");
    assert!(pipelined(b"POST / HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}G"));
    assert!(!pipelined(b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET"));
}

#[test]
fn an_absolute_form_target_replaces_host() {
    let h = head(&["GET http://admin.shop:8080/panel?x=1 HTTP/1.1", "Host: www.shop", "Accept: */*"]);
    let out = String::from_utf8(absolute_form_host(&h).unwrap().unwrap()).unwrap();
    assert_eq!(
        out,
        "GET http://admin.shop:8080/panel?x=1 HTTP/1.1\r\nHost: admin.shop:8080\r\nAccept: */*\r\n\r\n"
    );
    let no_host = head(&["GET HTTPS://admin.shop HTTP/1.1"]);
    let out = String::from_utf8(absolute_form_host(&no_host).unwrap().unwrap()).unwrap();
    assert_eq!(out, "GET HTTPS://admin.shop HTTP/1.1\r\nHost: admin.shop\r\n\r\n");
    assert_eq!(absolute_form_host(&head(&["GET /panel HTTP/1.1", "Host: www.shop"])), Ok(None));
    assert_eq!(absolute_form_host(&head(&["GET ftp://x/ HTTP/1.1", "Host: www.shop"])), Ok(None));
    let userinfo = head(&["GET http://www.shop@admin.shop/ HTTP/1.1", "Host: www.shop"]);
    assert_eq!(absolute_form_host(&userinfo).unwrap_err().code, Code::BadRequest);
}

#[test]
fn bodies_are_bounded_declared_or_counted() {
    assert_eq!(check_content_length(&req(&[("content-length", "10")]), 10), Ok(()));
    assert_eq!(check_content_length(&req(&[("content-length", "11")]), 10), Err(BODY_TOO_LARGE));
    assert_eq!(check_content_length(&req(&[]), 0), Ok(()), "no length: counted as it arrives");
    let mut count = BodyCount { max: 10, seen: 0 };
    assert_eq!(count.add(6), Ok(()));
    assert_eq!(count.add(4), Ok(()));
    assert_eq!(count.add(1), Err(BODY_TOO_LARGE));
}

#[test]
fn a_raw_answer_is_a_complete_json_response_that_closes() {
    let raw = String::from_utf8(raw_answer(&HEAD_TOO_LARGE, "rid")).unwrap();
    let (head, body) = raw.split_once("\r\n\r\n").unwrap();
    assert!(head.starts_with("HTTP/1.1 431 Request Header Fields Too Large\r\n"), "{head}");
    assert!(head.contains("Connection: close"));
    assert!(head.contains(&format!("Content-Length: {}", body.len())));
    let v: serde_json::Value = serde_json::from_str(body).unwrap();
    assert_eq!((v["code"].as_str(), v["request_id"].as_str()), (Some("HEADERS_TOO_LARGE"), Some("rid")));
}
