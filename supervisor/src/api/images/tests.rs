//! Each image source form, accepted or refused by its location, and fetching from a server on
//! 127.0.0.1 that this test starts (never the network): the cap while streaming, the timeout, the
//! content type, the switch. `serve_images` is shared with the API tests.

use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;

use super::source::Source;
use super::*;

/// The bytes `/cat.png` answers: a PNG signature and then some, not a real image (the
/// supervisor never decodes one).
pub(crate) const PNG: &[u8] = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR";

/// `data:image/png;base64,` of [`PNG`].
pub(crate) const PNG_DATA_URL: &str = "data:image/png;base64,iVBORw0KGgoAAAANSUhEUg==";

/// A server on 127.0.0.1: `/cat.png` (an image), `/page.html` (not one), `/missing` (404),
/// `/big` (64 KiB streamed in chunks without a length), `/never` (no answer). Returns its base
/// URL; it runs until the test's runtime ends.
pub(crate) async fn serve_images() -> String {
    let app = Router::new()
        .route(
            "/cat.png",
            get(|| async { ([(header::CONTENT_TYPE, "image/png")], PNG) }),
        )
        .route(
            "/page.html",
            get(|| async { ([(header::CONTENT_TYPE, "text/html")], "<p>hi</p>") }),
        )
        .route("/missing", get(|| async { StatusCode::NOT_FOUND }))
        .route(
            "/big",
            get(|| async {
                let chunks = (0..64).map(|_| Ok::<_, std::io::Error>(Bytes::from(vec![7u8; 1024])));
                let body = Body::from_stream(futures_util::stream::iter(chunks));
                ([(header::CONTENT_TYPE, "image/png")], body).into_response()
            }),
        )
        .route("/never", get(std::future::pending::<StatusCode>));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("binds 127.0.0.1");
    let address = listener.local_addr().expect("an address");
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{address}")
}

fn fetch(max_bytes: u64, timeout: Duration) -> ImageFetch {
    ImageFetch::new(true, max_bytes, timeout).expect("a client")
}

fn pending(url: &str) -> Pending {
    Pending::from_url(url, "messages[1].content[2]".to_owned()).expect("a well-formed URL")
}

fn refusal(url: &str) -> String {
    let error =
        Pending::from_url(url, "messages[1].content[2]".to_owned()).expect_err("a malformed URL");
    assert_eq!(error.location, "messages[1].content[2]");
    error.to_string()
}

#[test]
fn a_base64_data_url_is_its_bytes_padded_or_not_with_line_breaks_or_not() {
    assert_eq!(pending(PNG_DATA_URL).source, Source::Bytes(PNG.to_vec()));
    let unpadded = PNG_DATA_URL.trim_end_matches('=');
    assert_eq!(pending(unpadded).source, Source::Bytes(PNG.to_vec()));
    let wrapped = PNG_DATA_URL.replace("KGgo", "KG\ngo");
    assert_eq!(pending(&wrapped).source, Source::Bytes(PNG.to_vec()));
    let upper = PNG_DATA_URL.replace("data:image/png", "DATA:Image/PNG");
    assert_eq!(pending(&upper).source, Source::Bytes(PNG.to_vec()));
}

#[test]
fn an_http_url_waits_to_be_fetched() {
    for url in ["http://127.0.0.1/cat.png", "HTTPS://example.com/a.jpg"] {
        assert_eq!(pending(url).source, Source::Url(url.to_owned()));
    }
}

#[test]
fn malformed_urls_are_refused_naming_the_part() {
    let cases = [
        (
            "data:text/plain;base64,aGk=",
            "media type `text/plain` is not an image type",
        ),
        ("data:;base64,aGk=", "media type `` is not an image type"),
        ("data:image/png,%89PNG", "must be base64"),
        ("data:image/png;base64,***", "the image's base64 is invalid"),
        ("data:image/png;base64,", "holds no bytes"),
        ("data:image/png;base64", "needs a comma"),
        ("ftp://example.com/a.png", "must be a data: URL"),
        ("cat.png", "must be a data: URL"),
    ];
    for (url, problem) in cases {
        let message = refusal(url);
        assert!(message.starts_with("messages[1].content[2]: "), "{message}");
        assert!(message.contains(problem), "{url}: {message}");
    }
}

#[test]
fn base64_with_its_media_type_apart_is_checked_the_same_way() {
    let at = || "messages[0].content[0]".to_owned();
    let image = Pending::from_base64("image/jpeg", "/9j/4AAQ", at()).expect("an image");
    assert_eq!(
        image.source,
        Source::Bytes(vec![0xff, 0xd8, 0xff, 0xe0, 0, 0x10])
    );
    let error = Pending::from_base64("application/pdf", "JVBERi0=", at()).expect_err("no image");
    assert!(error.problem.contains("application/pdf"), "{error}");
    let error = Pending::from_base64("image/png", "not base64!", at()).expect_err("bad base64");
    assert!(error.problem.contains("base64 is invalid"), "{error}");
}

#[tokio::test]
async fn data_urls_and_fetched_urls_resolve_in_order_with_their_locations() {
    let base = serve_images().await;
    let images = vec![
        Pending::from_url(&format!("{base}/cat.png"), "a".to_owned()).unwrap(),
        Pending::from_url(PNG_DATA_URL, "b".to_owned()).unwrap(),
    ];
    let resolved = fetch(1024, Duration::from_secs(60))
        .resolve(images)
        .await
        .expect("both resolve");
    let got: Vec<(&[u8], &str)> = resolved
        .iter()
        .map(|image| (image.bytes.as_slice(), image.location.as_str()))
        .collect();
    assert_eq!(got, [(PNG, "a"), (PNG, "b")]);
}

#[tokio::test]
async fn each_fetch_failure_names_the_part() {
    let base = serve_images().await;
    let cases = [
        (
            "/page.html",
            "is not an image: its content type is text/html",
        ),
        ("/missing", "the server answered 404 Not Found"),
        ("/big", "is larger than 16384 bytes"),
        ("/never", "took longer than 0.2 s"),
    ];
    let fetch = fetch(16 * 1024, Duration::from_millis(200));
    for (path, problem) in cases {
        let image = pending(&format!("{base}{path}"));
        let error = fetch.resolve(vec![image]).await.expect_err("refused");
        assert_eq!(error.location, "messages[1].content[2]");
        assert!(error.problem.contains(problem), "{path}: {error}");
    }
    let error = fetch
        .resolve(vec![pending("http://127.0.0.1:1/cat.png")])
        .await
        .expect_err("nothing listens on port 1");
    assert!(
        error
            .problem
            .starts_with("fetching http://127.0.0.1:1/cat.png failed"),
        "{error}"
    );
}

#[tokio::test]
async fn a_server_that_does_not_fetch_refuses_urls_but_takes_data_urls() {
    let base = serve_images().await;
    let off = ImageFetch::new(false, 1024, Duration::from_secs(60)).unwrap();
    let error = off
        .resolve(vec![pending(&format!("{base}/cat.png"))])
        .await
        .expect_err("fetching is off");
    assert!(
        error.problem.contains("does not fetch image URLs"),
        "{error}"
    );
    let resolved = off.resolve(vec![pending(PNG_DATA_URL)]).await.unwrap();
    assert_eq!(resolved[0].bytes, PNG);
}
