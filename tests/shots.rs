//! Shot boundaries: on generated clips with cuts at known times, and on the slides fixture
//! against video2dataset's recorded segmentation (its tests: longest scene [0, 2096], last
//! [3015, 3677]).

use crate::need_ffmpeg;
use crate::util::*;

fn shots_pipeline(source: &str) -> String {
    format!(
        "name = \"t\"\n[source]\ntype = \"local\"\n{source}\n\n[[stages]]\nid = \"probe\"\ntype = \"probe\"\n\n[[stages]]\nid = \"shots\"\ntype = \"shots\"\n"
    )
}

#[test]
fn cuts_in_a_generated_clip_are_found_at_their_times() {
    need_ffmpeg!();
    let d = tempfile::tempdir().unwrap();
    let v = d.path().join("v");
    std::fs::create_dir_all(&v).unwrap();
    // Three shots of 2 s each, different content, cut hard at 2 s and 4 s; the first shot moves.
    ffmpeg(&[
        "-f",
        "lavfi",
        "-i",
        "testsrc2=s=320x180:r=25:d=2",
        "-f",
        "lavfi",
        "-i",
        "smptebars=s=320x180:r=25:d=2",
        "-f",
        "lavfi",
        "-i",
        "color=c=0x20a040:s=320x180:r=25:d=2",
        "-filter_complex",
        "[0:v][1:v][2:v]concat=n=3:v=1:a=0",
        "-c:v",
        "libx264",
        "-preset",
        "ultrafast",
        "-g",
        "50",
        v.join("three.mp4").to_str().unwrap(),
    ]);
    let p = d.path().join("p.toml");
    write(&p, &shots_pipeline("dir = \"v\""));
    let out = d.path().join("run");
    let o = run_into(&p, &out, d.path());
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let starts: Vec<f64> = column(&out.join("shots"), "start_secs")
        .iter()
        .map(|s| s.parse().unwrap())
        .collect();
    assert_eq!(starts.len(), 3, "shots start at {starts:?}");
    for (got, want) in starts.iter().zip([0.0, 2.0, 4.0]) {
        assert!((got - want).abs() <= 0.05, "shot starts {starts:?}");
    }
    assert!(
        column(&out.join("shots"), "shots_in_video")
            .iter()
            .all(|n| n == "3")
    );
}

#[test]
fn slides_fixture_matches_video2datasets_segmentation() {
    let d = tempfile::tempdir().unwrap();
    write(
        &d.path().join("m.csv"),
        &format!(
            "path,id\n{},slides\n",
            fixture_video("slides_1080p_122s.mp4").display()
        ),
    );
    let p = d.path().join("p.toml");
    write(&p, &shots_pipeline("manifest = \"m.csv\""));
    let out = d.path().join("run");
    let o = run_into(&p, &out, d.path());
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let s: Vec<i64> = column(&out.join("shots"), "start_frame")
        .iter()
        .map(|x| x.parse().unwrap())
        .collect();
    let e: Vec<i64> = column(&out.join("shots"), "end_frame")
        .iter()
        .map(|x| x.parse().unwrap())
        .collect();
    let longest = (0..s.len()).max_by_key(|&i| e[i] - s[i]).unwrap();
    // Within one second (30 frames) of video2dataset's [0, 2096] and [3015, 3677].
    assert_eq!(s[longest], 0);
    assert!(
        (e[longest] - 2096).abs() <= 30,
        "longest shot [{}, {}]",
        s[longest],
        e[longest]
    );
    assert!(
        (s[s.len() - 1] - 3015).abs() <= 30,
        "last shot starts at {}",
        s[s.len() - 1]
    );
}
