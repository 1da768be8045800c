use super::load::{Collection, Item, Kind, Video};
use super::*;

fn t() -> Thresholds {
    Thresholds {
        max_distance: 10,
        min_share: 0.5,
        min_frames: 2,
        min_similarity: 0.7,
    }
}

fn video(id: &str, split: &str, hashes: &[u64]) -> Video {
    Video {
        id: id.into(),
        key: ids::video_key(id, None),
        split: Some(split.into()),
        hashes: hashes.iter().map(|h| vec![*h]).collect(),
    }
}

fn item(id: &str, video: &str, split: &str, text: &str) -> Item {
    Item {
        item_id: id.into(),
        video_id: video.into(),
        split: Some(split.into()),
        text: text.into(),
    }
}

fn release(name: &str, videos: Vec<Video>, items: Vec<Item>) -> Collection {
    Collection {
        name: name.into(),
        kind: Kind::Release,
        videos,
        items,
    }
}

fn found(o: &[Overlap]) -> Vec<(&str, &str, &str)> {
    o.iter()
        .map(|o| {
            let (a, b) = match (&o.ours_item, &o.theirs_item) {
                (Some(a), Some(b)) => (a, b),
                _ => (&o.ours_video, &o.theirs_video),
            };
            (o.kind.as_str(), a.as_str(), b.as_str())
        })
        .collect()
}

const A: [u64; 4] = [
    0x0123_4567_89AB_CDEF,
    0xF0F0_0F0F_F0F0_0F0F,
    0x1357_9BDF_0246_8ACE,
    0xDEAD_BEEF_0BAD_F00D,
];

#[test]
fn frames_match_whatever_their_order_and_count() {
    // Theirs: A's frames reversed, 3 bits off, plus two unrelated frames; and a video sharing
    // a single frame with ours (one coincidence is not a match).
    let near: Vec<u64> = A.iter().rev().map(|h| h ^ 0b1011).collect();
    let mut long = near.clone();
    long.extend([0xAAAA_AAAA_AAAA_AAAA, 0x5555_5555_5555_5555]);
    let ours = release("ours", vec![video("a", "test", &A)], vec![]);
    let theirs = release(
        "theirs",
        vec![
            video("a_copy", "train", &long),
            video("one_frame", "train", &[A[0], !A[1], !A[2], !A[3]]),
        ],
        vec![],
    );
    let o = against(&ours, &theirs, &t());
    assert_eq!(found(&o), [("frames", "a", "a_copy")]);
    assert_eq!(o[0].frames_matched, Some(4));
    assert_eq!(o[0].frames_compared, Some(4));
    assert_eq!(o[0].distance, Some(3));
}

#[test]
fn near_duplicate_questions_are_found_and_others_are_not() {
    let q = "What is shown on screen throughout the clip?\nColoured test bars\nA crowd in a street";
    let ours = release(
        "ours",
        vec![],
        vec![
            item("x1", "x", "test", q),
            item(
                "x2",
                "x",
                "test",
                "Why would a station air this picture?\nTo tune sets\nTo sell",
            ),
        ],
    );
    let theirs = release(
        "theirs",
        vec![],
        vec![
            item(
                "y1",
                "y",
                "train",
                "What is shown on the screen throughout this clip?\nColoured test bars\nA crowd in a street",
            ),
            item(
                "y2",
                "y",
                "train",
                "How many people speak in the video?\nOne\nTwo",
            ),
        ],
    );
    let o = against(&ours, &theirs, &t());
    assert_eq!(found(&o), [("question", "x1", "y1")]);
    let sim = o[0].similarity.unwrap();
    assert!((0.7..1.0).contains(&sim), "{sim}");
    // The same check by brute force, at every threshold: prefix filtering misses nothing.
    for min in [0.1, 0.3, 0.5, 0.7, 0.9] {
        let mut th = t();
        th.min_similarity = min;
        let want = ours
            .items
            .iter()
            .flat_map(|x| theirs.items.iter().map(move |y| (x, y)))
            .filter(|(x, y)| crate::benchmark::text::similarity(&x.text, &y.text) >= min)
            .count();
        assert_eq!(against(&ours, &theirs, &th).len(), want, "min {min}");
    }
}

#[test]
fn leakage_counts_only_pairs_across_splits_once() {
    let moved: Vec<u64> = A.iter().map(|h| h ^ 1).collect();
    let q = "Which colour is the disc in the middle?";
    let r = release(
        "r",
        vec![
            video("a", "train", &A),
            video("a_same_split", "train", &moved),
            video("a_in_test", "test", &moved),
            video("https://youtu.be/dQw4w9WgXcQ", "train", &[]),
            video("dQw4w9WgXcQ", "test", &[]),
        ],
        vec![
            item("i1", "a", "train", q),
            item("i2", "a_in_test", "test", q),
            item("i3", "a_same_split", "train", q),
        ],
    );
    let o = leakage(&r, &t());
    assert_eq!(
        found(&o),
        [
            ("id", "https://youtu.be/dQw4w9WgXcQ", "dQw4w9WgXcQ"),
            ("frames", "a", "a_in_test"),
            ("frames", "a_same_split", "a_in_test"),
            ("question", "i1", "i2"),
            ("question", "i2", "i3"),
        ]
    );
    assert!(o.iter().all(|o| o.against == OWN_SPLITS));
}
