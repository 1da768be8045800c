use super::uploads::parse_uploads;
use super::*;

#[tokio::test]
async fn memory_store_speaks_the_store_contract() {
    let store = Arc::new(ObjectStoreRun::open("memory://bucket/runs/a").unwrap());
    store
        .put("probe/part-00000.parquet", b"x".to_vec())
        .await
        .unwrap();
    // Last: a retried create that finds its own bytes has won (the first try was applied).
    for (bytes, created) in [(b"1", true), (b"2", false), (b"1", true)] {
        let put = store.put_if_absent("probe/part-00001.parquet", bytes.to_vec());
        assert_eq!(put.await.unwrap(), created, "{bytes:?}");
    }
    assert_eq!(store.get("probe/part-00001.parquet").await.unwrap(), b"1");
    assert_eq!(
        store.list("probe").await.unwrap(),
        vec!["probe/part-00000.parquet", "probe/part-00001.parquet"]
    );
    let big: Vec<u8> = (0..(PART_SIZE * 2 + 123))
        .map(|i| (i % 251) as u8)
        .collect();
    let (dir, input) = crate::store::test_support::file_with("in.mp4", &big);
    store.put_file("media/x.mp4", &input).await.unwrap();
    store
        .get_file("media/x.mp4", &dir.path().join("out/x.mp4"))
        .await
        .unwrap();
    assert_eq!(std::fs::read(dir.path().join("out/x.mp4")).unwrap(), big);
    store.delete("media/x.mp4").await.unwrap();
    store.delete("media/x.mp4").await.unwrap();
    assert!(!store.exists("media/x.mp4").await.unwrap());
    assert!(store.get("nothing").await.unwrap_err().kind() == io::ErrorKind::NotFound);
}

#[test]
fn uploads_answers_parse_with_their_next_page() {
    // The shape of AWS's documented example answer, truncated after two uploads.
    let xml = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<ListMultipartUploadsResult xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">\
        <Bucket>b</Bucket><KeyMarker></KeyMarker><UploadIdMarker></UploadIdMarker>\
        <NextKeyMarker>runs/a/media/x&amp;y.mp4</NextKeyMarker><NextUploadIdMarker>id-2</NextUploadIdMarker>\
        <MaxUploads>2</MaxUploads><IsTruncated>true</IsTruncated>\
        <Upload><Key>runs/a/media/w.mp4</Key><UploadId>id-1</UploadId><Initiator><ID>i</ID></Initiator>\
        <StorageClass>STANDARD</StorageClass><Initiated>2026-12-03T10:00:00.000Z</Initiated></Upload>\
        <Upload><Key>runs/a/media/x&amp;y.mp4</Key><UploadId>id-2</UploadId>\
        <Initiated>2026-12-03T11:30:00.000Z</Initiated></Upload></ListMultipartUploadsResult>";
    let page = parse_uploads(xml).unwrap();
    assert_eq!(page.uploads.len(), 2);
    assert_eq!(page.uploads[1].key, "runs/a/media/x&y.mp4");
    assert_eq!(page.uploads[1].id, "id-2");
    let secs =
        |t: std::time::SystemTime| t.duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
    assert_eq!(
        secs(page.uploads[1].initiated) - secs(page.uploads[0].initiated),
        5400
    );
    assert_eq!(
        page.next,
        Some(("runs/a/media/x&y.mp4".to_string(), "id-2".to_string()))
    );
    let last = xml.replace("<IsTruncated>true", "<IsTruncated>false");
    assert_eq!(parse_uploads(&last).unwrap().next, None);
    assert!(parse_uploads("<Error><Code>AccessDenied</Code></Error>").is_err());
    assert!(parse_uploads(&xml.replace("<UploadId>id-1</UploadId>", "")).is_err());
}

#[test]
fn s3_error_bodies_lose_what_names_the_key() {
    let body = "<Error><Code>SignatureDoesNotMatch</Code><AWSAccessKeyId>AKIAVIDCURATE0TEST01</AWSAccessKeyId>\
        <StringToSign>AWS4-HMAC-SHA256\n20261201T000000Z\n20261201/us-east-1/s3/aws4_request\nabc</StringToSign>\
        <CanonicalRequest>PUT\n/b/k\n</CanonicalRequest><HostId>h</HostId></Error> (key AKIAVIDCURATE0TEST01)";
    let out = scrub_body(body);
    assert!(!out.contains("AKIAVIDCURATE0TEST01"), "{out}");
    assert!(!out.contains("aws4_request"), "{out}");
    assert!(out.contains("<Code>SignatureDoesNotMatch</Code>"), "{out}");
    assert!(
        out.contains("<AWSAccessKeyId>***</AWSAccessKeyId>"),
        "{out}"
    );
}
