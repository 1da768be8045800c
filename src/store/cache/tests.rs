use super::*;

#[test]
fn put_get_counts_hits_and_misses() {
    let dir = tempfile::tempdir().unwrap();
    let c = ResponseCache::open(&dir.path().join("c.sqlite")).unwrap();
    let k = CacheKey {
        service: "youtube".into(),
        method: "search.list".into(),
        request: "q=riot".into(),
    };
    assert!(c.get(&k).unwrap().is_none());
    c.put(
        &k,
        &CachedResponse {
            status: 200,
            body: b"{}".to_vec(),
            latency_ms: 5,
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(c.get(&k).unwrap().unwrap().body, b"{}");
    let s = c.stats().unwrap();
    assert_eq!(s.len(), 1);
    assert_eq!((s[0].entries, s[0].hits, s[0].misses), (1, 1, 1));
}

fn key(request: &str) -> CacheKey {
    CacheKey {
        service: "vlm".into(),
        method: "openai:gpt-4o".into(),
        request: request.into(),
    }
}

fn answer(tokens: i64) -> CachedResponse {
    CachedResponse {
        status: 200,
        body: b"{}".to_vec(),
        input_tokens: Some(tokens),
        output_tokens: Some(1),
        ..Default::default()
    }
}

#[tokio::test]
async fn answers_and_lookups_count_for_the_stage_that_made_them() {
    let dir = tempfile::tempdir().unwrap();
    let c = Arc::new(ResponseCache::open(&dir.path().join("c.sqlite")).unwrap());
    for_stage("caption", async {
        assert!(c.lookup(&key("a")).await.unwrap().is_none());
        c.store(&key("a"), answer(10)).await.unwrap();
        c.store(&key("b"), answer(20)).await.unwrap();
    })
    .await;
    for_stage("questions", async {
        assert!(c.lookup(&key("c")).await.unwrap().is_none());
        c.store(&key("c"), answer(5)).await.unwrap();
        // Another stage's answer: a hit of this stage, still stored for the one that paid.
        assert!(c.lookup(&key("a")).await.unwrap().is_some());
    })
    .await;
    // Outside any stage, and a stage the record names itself (a batch's answer).
    c.store(&key("d"), answer(1)).await.unwrap();
    let named = CachedResponse {
        stage: Some("blind".into()),
        ..answer(2)
    };
    for_stage("questions", async { c.store(&key("e"), named).await })
        .await
        .unwrap();
    assert_eq!(
        c.get(&key("a")).unwrap().unwrap().stage.as_deref(),
        Some("caption")
    );
    let got: Vec<_> = c
        .stats()
        .unwrap()
        .into_iter()
        .map(|s| (s.stage, s.entries, s.hits, s.misses, s.input_tokens))
        .collect();
    assert_eq!(
        got,
        vec![
            // The `get` above, outside a stage, is the no-stage row's hit.
            (None, 1, 1, 0, 1),
            (Some("blind".into()), 1, 0, 0, 2),
            (Some("caption".into()), 2, 0, 1, 30),
            (Some("questions".into()), 1, 1, 1, 5),
        ]
    );
    let total = by_service(&c.stats().unwrap());
    assert_eq!(total.len(), 1);
    assert_eq!(
        (total[0].entries, total[0].hits, total[0].misses),
        (5, 2, 2)
    );
    assert_eq!((total[0].input_tokens, total[0].stage.clone()), (38, None));
}

/// The tables as the version before `batch` and `stage` wrote them.
const OLD_SCHEMA: &str = "
        CREATE TABLE responses (
            key TEXT PRIMARY KEY, service TEXT NOT NULL, method TEXT NOT NULL,
            request TEXT NOT NULL, status INTEGER NOT NULL, body BLOB NOT NULL, parsed TEXT,
            input_tokens INTEGER, output_tokens INTEGER, latency_ms INTEGER NOT NULL,
            created_at TEXT NOT NULL);
        CREATE TABLE lookups (
            service TEXT NOT NULL, method TEXT NOT NULL,
            hits INTEGER NOT NULL DEFAULT 0, misses INTEGER NOT NULL DEFAULT 0,
            PRIMARY KEY (service, method));
        INSERT INTO responses VALUES ('k1', 'vlm', 'openai:gpt-4o', 'r', 200, x'7b7d', NULL, 7, 3, 4, 'then');
        INSERT INTO lookups VALUES ('vlm', 'openai:gpt-4o', 2, 1);";

#[tokio::test]
async fn an_old_cache_opens_and_keeps_its_totals_under_no_stage() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("old.sqlite");
    Connection::open(&path)
        .unwrap()
        .execute_batch(OLD_SCHEMA)
        .unwrap();
    let c = Arc::new(ResponseCache::open(&path).unwrap());
    let s = c.stats().unwrap();
    assert_eq!(s.len(), 1);
    assert_eq!(
        (
            s[0].stage.clone(),
            s[0].entries,
            s[0].hits,
            s[0].misses,
            s[0].input_tokens
        ),
        (None, 1, 2, 1, 7)
    );
    // New answers and lookups go on beside the old ones, per stage.
    for_stage("caption", async {
        assert!(c.lookup(&key("new")).await.unwrap().is_none());
        c.store(&key("new"), answer(10)).await.unwrap();
    })
    .await;
    let s = c.stats().unwrap();
    assert_eq!(s.len(), 2, "{s:?}");
    assert_eq!(
        (s[1].stage.as_deref(), s[1].entries, s[1].misses),
        (Some("caption"), 1, 1)
    );
    // Opening again finds nothing left to migrate.
    drop(c);
    assert_eq!(ResponseCache::open(&path).unwrap().stats().unwrap(), s);
}

#[test]
fn parts_of_an_old_version_and_of_this_one_import() {
    let dir = tempfile::tempdir().unwrap();
    let old = dir.path().join("old-part.sqlite");
    Connection::open(&old)
        .unwrap()
        .execute_batch(OLD_SCHEMA)
        .unwrap();
    let writer = ResponseCache::open(&dir.path().join("w.sqlite")).unwrap();
    let staged = CachedResponse {
        stage: Some("questions".into()),
        ..answer(4)
    };
    writer.put(&key("q"), &staged).unwrap();
    let (done, last) = writer.unpublished().unwrap();
    let new = dir.path().join("new-part.sqlite");
    assert_eq!(writer.export(done, last, &new).unwrap(), 1);

    let c = ResponseCache::open(&dir.path().join("c.sqlite")).unwrap();
    assert_eq!(c.import(&old, "old").unwrap(), 1);
    assert_eq!(c.import(&new, "new").unwrap(), 1);
    let got: Vec<_> = c
        .stats()
        .unwrap()
        .into_iter()
        .map(|s| (s.stage, s.entries, s.batch_entries))
        .collect();
    assert_eq!(got, vec![(None, 1, 0), (Some("questions".into()), 1, 0)]);
}
