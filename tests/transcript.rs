//! The `transcript` stage on speech Debian's espeak-ng says at known times, against a fake
//! OpenAI transcription server on 127.0.0.1 that answers in the shape of a real recorded
//! `verbose_json` body (tests/fixtures/asr/), with segments filled in where the words are.

use crate::fake_http::{FakeServer, Request, Response};
use crate::need_ffmpeg;
use crate::util::*;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::sync::{Arc, Mutex};

const KEY: &str = "sk-test-asr-5be2c0";
const ESPEAK_RATE: usize = 22_050;
/// The phrases and where each starts in the clip (seconds).
const SAID: [(&str, f64); 4] = [
    ("alpha bravo", 0.6),
    ("charlie delta", 3.9),
    ("echo foxtrot", 7.3),
    ("golf hotel", 10.8),
];
const CLIP_SECS: f64 = 13.5;
/// Uploads of at most ~4 s (16 kHz, 16-bit): the 13.5 s clip needs several.
const MAX_UPLOAD: usize = 44 + 4 * 32_000;

fn has_espeak() -> bool {
    Command::new("espeak-ng")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// 16-bit mono samples and rate of a WAV file written by espeak-ng (or by us).
fn read_wav(bytes: &[u8]) -> (u32, u16, u16, Vec<i16>) {
    assert_eq!(&bytes[0..4], b"RIFF");
    assert_eq!(&bytes[8..12], b"WAVE");
    let (mut pos, mut fmt, mut data) = (12, None, None);
    while pos + 8 <= bytes.len() {
        let id = &bytes[pos..pos + 4];
        let len = u32::from_le_bytes(bytes[pos + 4..pos + 8].try_into().unwrap()) as usize;
        let body = &bytes[pos + 8..(pos + 8 + len).min(bytes.len())];
        if id == b"fmt " {
            let channels = u16::from_le_bytes(body[2..4].try_into().unwrap());
            let rate = u32::from_le_bytes(body[4..8].try_into().unwrap());
            let bits = u16::from_le_bytes(body[14..16].try_into().unwrap());
            fmt = Some((rate, channels, bits));
        } else if id == b"data" {
            data = Some(body);
        }
        pos += 8 + len + (len & 1);
    }
    let (rate, channels, bits) = fmt.expect("fmt chunk");
    let samples = data
        .expect("data chunk")
        .chunks_exact(2)
        .map(|b| i16::from_le_bytes([b[0], b[1]]))
        .collect();
    (rate, channels, bits, samples)
}

fn write_wav(path: &Path, rate: u32, samples: &[i16]) {
    let data = (samples.len() * 2) as u32;
    let mut out = vec![];
    out.extend_from_slice(b"RIFF");
    out.extend_from_slice(&(36 + data).to_le_bytes());
    out.extend_from_slice(b"WAVEfmt ");
    out.extend_from_slice(&16u32.to_le_bytes());
    out.extend_from_slice(&1u16.to_le_bytes());
    out.extend_from_slice(&1u16.to_le_bytes());
    out.extend_from_slice(&rate.to_le_bytes());
    out.extend_from_slice(&(rate * 2).to_le_bytes());
    out.extend_from_slice(&2u16.to_le_bytes());
    out.extend_from_slice(&16u16.to_le_bytes());
    out.extend_from_slice(b"data");
    out.extend_from_slice(&data.to_le_bytes());
    for s in samples {
        out.extend_from_slice(&s.to_le_bytes());
    }
    std::fs::write(path, out).unwrap();
}

/// Makes `speech.mp4` (the phrases at their offsets over silence, AAC in MP4 as uploads are)
/// and `silent.mp4` (no audio stream at all) in `dir`; returns each phrase's speech interval in
/// seconds of the clip, measured on the samples espeak-ng produced.
fn make_media(dir: &Path) -> Vec<(String, f64, f64)> {
    let mut track = vec![0i16; (CLIP_SECS * ESPEAK_RATE as f64) as usize];
    let mut said = vec![];
    for (i, (text, at)) in SAID.iter().enumerate() {
        let wav = dir.join(format!("phrase{i}.wav"));
        let o = Command::new("espeak-ng")
            .args(["-w", wav.to_str().unwrap(), text])
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let (rate, channels, _, pcm) = read_wav(&std::fs::read(&wav).unwrap());
        assert_eq!((rate as usize, channels), (ESPEAK_RATE, 1));
        let loud = |s: &i16| s.unsigned_abs() > 300;
        let first = pcm.iter().position(loud).unwrap();
        let last = pcm.iter().rposition(loud).unwrap();
        let start = (at * ESPEAK_RATE as f64) as usize;
        track[start..start + pcm.len()].copy_from_slice(&pcm);
        let secs = |n: usize| n as f64 / ESPEAK_RATE as f64;
        said.push((text.to_string(), at + secs(first), at + secs(last)));
    }
    let wav = dir.join("track.wav");
    write_wav(&wav, ESPEAK_RATE as u32, &track);
    std::fs::create_dir_all(dir.join("v")).unwrap();
    ffmpeg(&[
        "-f",
        "lavfi",
        "-i",
        &format!("color=c=gray:s=160x120:r=10:d={CLIP_SECS}"),
        "-i",
        wav.to_str().unwrap(),
        "-c:v",
        "libx264",
        "-preset",
        "ultrafast",
        "-c:a",
        "aac",
        "-b:a",
        "96k",
        "-shortest",
        dir.join("v/speech.mp4").to_str().unwrap(),
    ]);
    ffmpeg(&[
        "-f",
        "lavfi",
        "-i",
        "color=c=blue:s=160x120:r=10:d=2",
        "-c:v",
        "libx264",
        "-preset",
        "ultrafast",
        "-an",
        dir.join("v/silent.mp4").to_str().unwrap(),
    ]);
    said
}

/// The parts of a multipart/form-data body: name → bytes.
fn multipart(r: &Request) -> BTreeMap<String, Vec<u8>> {
    let ct = r.headers.get("content-type").expect("content type");
    let boundary = ct
        .split("boundary=")
        .nth(1)
        .expect("boundary")
        .trim_matches('"');
    let delim = format!("--{boundary}");
    let body = &r.body;
    let find = |from: usize, pat: &[u8]| {
        body[from..]
            .windows(pat.len())
            .position(|w| w == pat)
            .map(|p| p + from)
    };
    let mut parts = BTreeMap::new();
    let mut pos = find(0, delim.as_bytes()).expect("first boundary") + delim.len();
    while body[pos..].starts_with(b"\r\n") {
        let head_end = find(pos, b"\r\n\r\n").unwrap();
        let head = String::from_utf8_lossy(&body[pos + 2..head_end]).to_string();
        let next = find(head_end, format!("\r\n{delim}").as_bytes()).expect("closing boundary");
        let name = head
            .split("name=\"")
            .nth(1)
            .and_then(|s| s.split('"').next())
            .unwrap()
            .to_string();
        parts.insert(name, body[head_end + 4..next].to_vec());
        pos = next + 2 + delim.len();
    }
    assert!(body[pos..].starts_with(b"--"), "multipart body not closed");
    parts
}

fn recorded_body() -> Value {
    serde_json::from_slice(
        &std::fs::read(fixtures().join("asr/openai_verbose_json_segment.json")).unwrap(),
    )
    .unwrap()
}

/// The fake OpenAI server. It checks the key, keeps every upload, and answers with the recorded
/// body's structure carrying one segment per phrase heard in the upload: it places the upload
/// in the clip by adding up the lengths of the uploads before it (a clip's uploads come in
/// order), so the times it answers are relative to the upload, as a real service's are.
struct Asr {
    server: FakeServer,
    uploads: Arc<Mutex<Vec<Vec<u8>>>>,
}

fn asr_fake(said: Vec<(String, f64, f64)>) -> Asr {
    let uploads: Arc<Mutex<Vec<Vec<u8>>>> = Arc::default();
    let offset = Arc::new(Mutex::new(0.0f64));
    let kept = uploads.clone();
    let server = FakeServer::start(move |r: &Request| {
        assert_eq!(r.path, "/v1/audio/transcriptions");
        let auth = r.headers.get("authorization").cloned().unwrap_or_default();
        if auth != format!("Bearer {KEY}") {
            // OpenAI's answer to a wrong key quotes (part of) it back.
            let given = auth.trim_start_matches("Bearer ");
            return Response::json(
                401,
                json!({"error": {"message": format!("Incorrect API key provided: {given}. You can find your API key at https://platform.openai.com/account/api-keys."), "type": "invalid_request_error", "param": null, "code": "invalid_api_key"}}).to_string(),
            );
        }
        let parts = multipart(r);
        let wav = parts["file"].clone();
        let (rate, _, _, pcm) = read_wav(&wav);
        let secs = pcm.len() as f64 / rate as f64;
        kept.lock().unwrap().push(wav);
        let mut off = offset.lock().unwrap();
        let (a, b) = (*off, *off + secs);
        *off = b;
        let mut body = recorded_body();
        let template = body["segments"][0].clone();
        let mut segments = vec![];
        for (text, s, e) in &said {
            if *e > a && *s < b {
                let mut seg = template.clone();
                seg["id"] = json!(segments.len());
                seg["start"] = json!(((s - a).max(0.0) * 100.0).round() / 100.0);
                seg["end"] = json!(((e.min(b) - a) * 100.0).round() / 100.0);
                seg["text"] = json!(format!(" {text}"));
                segments.push(seg);
            }
        }
        body["text"] = json!(
            segments
                .iter()
                .map(|s| s["text"].as_str().unwrap().trim().to_string())
                .collect::<Vec<_>>()
                .join(" ")
        );
        body["duration"] = json!(secs);
        body["segments"] = json!(segments);
        Response::json(200, body.to_string())
    });
    Asr { server, uploads }
}

fn pipeline_file(dir: &Path, url: &str, max_upload: usize) -> std::path::PathBuf {
    let p = dir.join("p.toml");
    write(
        &p,
        &format!(
            r#"name = "asr"
[services.asr]
base_url = "{url}v1/"
api_key_env = "VIDCURATE_TEST_ASR_KEY"
timeout_secs = 20

[source]
type = "local"
dir = "v"

[[stages]]
id = "probe"
type = "probe"

[[stages]]
id = "transcript"
type = "transcript"
retries = 0
compute = {{ service = "asr", model = "whisper-1", max_upload_bytes = {max_upload} }}
"#
        ),
    );
    p
}

fn run_keyed(p: &Path, out: &Path, key: &str) -> std::process::Output {
    run_command(p, out)
        .env("VIDCURATE_TEST_ASR_KEY", key)
        .output()
        .unwrap()
}

fn err(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn num(r: &BTreeMap<String, String>, k: &str) -> f64 {
    r[k].parse().unwrap_or_else(|_| panic!("{k} = {:?}", r[k]))
}

#[test]
fn speech_is_cut_at_pauses_timed_in_the_video_and_never_paid_for_twice() {
    need_ffmpeg!();
    if !has_espeak() {
        panic!("espeak-ng is not installed: run scripts/setup.sh");
    }
    let dir = tempfile::tempdir().unwrap();
    let said = make_media(dir.path());
    let asr = asr_fake(said.clone());
    let p = pipeline_file(dir.path(), &asr.server.url(), MAX_UPLOAD);
    let out = dir.path().join("run");
    let o = run_keyed(&p, &out, KEY);
    assert!(o.status.success(), "{}", err(&o));

    // Every upload: 16 kHz mono 16-bit WAV under the limit, with the fields the API takes.
    let requests = asr.server.requests();
    let uploads = asr.uploads.lock().unwrap().clone();
    assert!(uploads.len() >= 3, "{} uploads", uploads.len());
    for (r, _) in &requests {
        let parts = multipart(r);
        assert_eq!(parts["model"], b"whisper-1");
        assert_eq!(parts["response_format"], b"verbose_json");
        assert_eq!(parts["timestamp_granularities[]"], b"segment");
        assert!(!parts.contains_key("language"));
    }
    let mut cut = 0.0;
    let mut cuts = vec![];
    for wav in &uploads {
        assert!(wav.len() <= MAX_UPLOAD, "{} bytes", wav.len());
        let (rate, channels, bits, pcm) = read_wav(wav);
        assert_eq!((rate, channels, bits), (16_000, 1, 16));
        cut += pcm.len() as f64 / 16_000.0;
        cuts.push(cut);
    }
    // The uploads run from the start to past the last word; the digital silence after it is
    // not sent (it would cost money and Whisper invents words for silence).
    let total = cuts.pop().unwrap();
    let last_word = said.last().unwrap().2;
    assert!(
        total > last_word && total < CLIP_SECS,
        "uploads cover {total} s"
    );
    // No cut inside a word: each falls in a pause between two phrases.
    for c in &cuts {
        assert!(
            said.iter().all(|(_, s, e)| c < s || c > e),
            "a cut at {c:.3} s falls in speech {said:?}"
        );
    }
    // The uploads hold the speech where it was said (the decode and resampling keep time):
    // loud inside each phrase, near-silent half a second away from any.
    let all: Vec<i16> = uploads.iter().flat_map(|w| read_wav(w).3).collect();
    let rms = |a: f64, b: f64| {
        let w = &all[(a * 16_000.0) as usize..((b * 16_000.0) as usize).min(all.len())];
        (w.iter().map(|&s| (s as f64).powi(2)).sum::<f64>() / w.len() as f64).sqrt()
    };
    for (text, s, e) in &said {
        assert!(rms(*s, *e) > 500.0, "{text}: {}", rms(*s, *e));
        assert!(
            rms(e + 0.5, e + 1.0) < 50.0,
            "after {text}: {}",
            rms(e + 0.5, e + 1.0)
        );
    }

    // Video ids are hashes: which is which, by the source table's paths.
    let names: BTreeMap<String, String> = table_rows_file_all(&out.join("source"))
        .into_iter()
        .map(|r| (r["video_id"].clone(), r["path"].clone()))
        .collect();
    let is = |r: &BTreeMap<String, String>, name: &str| names[&r["video_id"]].ends_with(name);
    // The segments are timed in the video: the phrases at their known times.
    let rows = table_rows_file_all(&out.join("transcript"));
    let speech: Vec<_> = rows.iter().filter(|r| is(r, "speech.mp4")).collect();
    assert_eq!(speech.len(), SAID.len(), "{rows:#?}");
    for (i, (r, (text, s, e))) in speech.iter().zip(&said).enumerate() {
        assert_eq!(r["segment_index"], i.to_string());
        assert_eq!(&r["text"], text);
        assert!(
            (num(r, "start_secs") - s).abs() < 0.06,
            "{text}: {r:?} vs {s}"
        );
        assert!(
            (num(r, "end_secs") - e).abs() < 0.06,
            "{text}: {r:?} vs {e}"
        );
        assert_eq!(r["source"], "asr:whisper-1");
        assert_eq!(r["language"], "english");
        assert_eq!(r["reason"], "null");
        let k: usize = r["chunk_index"].parse().unwrap();
        let chunk_start = if k == 0 { 0.0 } else { cuts[k - 1] };
        assert!(
            (num(r, "chunk_start_secs") - chunk_start).abs() < 0.002,
            "{r:?}"
        );
    }
    // The clip without an audio stream: an empty transcript and why, not a reject.
    let silent: Vec<_> = rows.iter().filter(|r| is(r, "silent.mp4")).collect();
    assert_eq!(silent.len(), 1, "{rows:#?}");
    assert_eq!(silent[0]["segment_index"], "null");
    assert_eq!(silent[0]["text"], "");
    assert_eq!(silent[0]["reason"], "no_audio_stream");
    assert!(table_rows(&out.join("rejects"), &[]).is_empty());
    assert_eq!(counts(&out, "transcript")["forwarded"], 2);
    assert_eq!(
        counts(&out, "transcript")["tally"]["silent_uploads_skipped"],
        1
    );

    // A rerun pays nothing; nor does rebuilding the table: every answer is in the cache.
    let calls = asr.server.requests().len();
    let o = run_keyed(&p, &out, KEY);
    assert!(o.status.success(), "{}", err(&o));
    assert_eq!(asr.server.requests().len(), calls);
    let before = table_rows(&out.join("transcript"), &[]);
    std::fs::remove_dir_all(out.join("transcript")).unwrap();
    let o = run_keyed(&p, &out, KEY);
    assert!(o.status.success(), "{}", err(&o));
    assert_eq!(asr.server.requests().len(), calls);
    assert_eq!(table_rows(&out.join("transcript"), &[]), before);
    assert_eq!(
        counts(&out, "transcript")["tally"]["uploads_cached"],
        uploads.len()
    );

    // The release carries one transcript per video, with its source.
    let o = run(&["split", out.to_str().unwrap()], dir.path());
    assert!(o.status.success(), "{}", err(&o));
    let rel = dir.path().join("release");
    let o = run(
        &[
            "release",
            out.to_str().unwrap(),
            "--out",
            rel.to_str().unwrap(),
        ],
        dir.path(),
    );
    assert!(o.status.success(), "{}", err(&o));
    let released = table_rows_file_all(&rel.join("data"));
    let by_id = |s: &str| released.iter().find(|r| is(r, s)).unwrap();
    let words: Vec<&str> = SAID.iter().map(|(t, _)| *t).collect();
    assert_eq!(by_id("speech.mp4")["transcript"], words.join(" "));
    assert_eq!(by_id("speech.mp4")["transcript_source"], "asr:whisper-1");
    assert_eq!(by_id("silent.mp4")["transcript"], "");
    assert_eq!(by_id("silent.mp4")["transcript_reason"], "no_audio_stream");
    let card = std::fs::read_to_string(rel.join("README.md")).unwrap();
    assert!(card.contains("`transcript`"), "{card}");

    // A wrong key stops the run with a clear message that does not hold the key.
    let o = run_keyed(&p, &dir.path().join("run-badkey"), "sk-wrong-9f1e77");
    assert_eq!(o.status.code(), Some(2), "{}", err(&o));
    let e = err(&o);
    assert!(
        e.contains("invalid_api_key") && e.contains("VIDCURATE_TEST_ASR_KEY"),
        "{e}"
    );
    assert!(!e.contains("sk-wrong-9f1e77"), "{e}");
}

/// Captions beside the media (yt-dlp's `<stem>.<lang>.json3`) are used first: no upload, and the
/// source says where the text came from.
#[test]
fn captions_beside_the_media_are_used_before_the_service() {
    need_ffmpeg!();
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("v")).unwrap();
    plain_clip(&dir.path().join("v/talk.mp4"), 3.0, "160x120");
    write(
        &dir.path().join("v/talk.en.json3"),
        r#"{"wireMagic":"pb3","events":[{"tStartMs":0,"dDurationMs":3000,"id":1,"wpWinPosId":1},
            {"tStartMs":200,"dDurationMs":1500,"wWinId":1,"segs":[{"utf8":"good","acAsrConf":0},{"utf8":" morning","tOffsetMs":400}]},
            {"tStartMs":1690,"dDurationMs":20,"wWinId":1,"aAppend":1,"segs":[{"utf8":"\n"}]},
            {"tStartMs":1700,"dDurationMs":1200,"wWinId":1,"segs":[{"utf8":"everyone"}]}]}"#,
    );
    let asr = asr_fake(vec![]);
    let p = pipeline_file(dir.path(), &asr.server.url(), 1 << 20);
    let out = dir.path().join("run");
    let o = run_keyed(&p, &out, KEY);
    assert!(o.status.success(), "{}", err(&o));
    assert_eq!(asr.server.requests().len(), 0);
    let rows = table_rows_file_all(&out.join("transcript"));
    let got: Vec<(String, String, String, String)> = rows
        .iter()
        .map(|r| {
            (
                r["text"].clone(),
                r["start_secs"].clone(),
                r["end_secs"].clone(),
                r["source"].clone(),
            )
        })
        .collect();
    let row = |t: &str, s: &str, e: &str| (t.into(), s.into(), e.into(), "captions:json3".into());
    assert_eq!(
        got,
        vec![
            row("good morning", "0.2", "1.7"),
            row("everyone", "1.7", "2.9")
        ]
    );
    assert_eq!(rows[0]["language"], "en");
}

/// A YouTube video's own captions: the download stage (`captions = true`) asks yt-dlp for them
/// and keeps them beside the stored media; the transcript stage uses them and calls nothing.
/// yt-dlp is a stand-in script here (no network): it records its arguments and writes what the
/// real one writes for `--output media.%(ext)s`: `media.mp4` and `media.<lang>.json3`.
#[cfg(unix)]
#[test]
fn youtube_captions_go_from_the_download_to_the_transcript() {
    need_ffmpeg!();
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    plain_clip(&d.join("clip.mp4"), 2.0, "160x120");
    write(
        &d.join("caps.json3"),
        r#"{"wireMagic":"pb3","events":[{"tStartMs":100,"dDurationMs":900,"segs":[{"utf8":"never gonna"},{"utf8":" give you up","tOffsetMs":500}]}]}"#,
    );
    let script = d.join("fake-yt-dlp");
    write(
        &script,
        &format!(
            "#!/bin/sh\necho \"$@\" > {args}\ncp {clip} media.mp4\ncp {caps} media.en.json3\ncp {caps} media.en-orig.json3\necho media.mp4\n",
            args = d.join("args.txt").display(),
            clip = d.join("clip.mp4").display(),
            caps = d.join("caps.json3").display(),
        ),
    );
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    write(
        &d.join("m.csv"),
        "id,path\nrick,https://www.youtube.com/watch?v=dQw4w9WgXcQ\n",
    );
    let asr = asr_fake(vec![]);
    let p = d.join("p.toml");
    write(
        &p,
        &format!(
            r#"name = "yt"
[services.asr]
base_url = "{}v1/"
api_key_env = "VIDCURATE_TEST_ASR_KEY"

[source]
type = "local"
manifest = "m.csv"
urls = true

[[stages]]
id = "download"
type = "download"
compute = {{ youtube = true, yt_dlp = "{}", captions = true }}

[[stages]]
id = "transcript"
type = "transcript"
compute = {{ service = "asr", language = "en" }}
"#,
            asr.server.url(),
            script.display()
        ),
    );
    let out = d.join("run");
    let o = run_keyed(&p, &out, KEY);
    assert!(o.status.success(), "{}", err(&o));
    let args = std::fs::read_to_string(d.join("args.txt")).unwrap();
    assert!(
        args.contains(
            "--write-subs --write-auto-subs --sub-format json3 --sub-langs en.*,-live_chat"
        ),
        "{args}"
    );
    // Both tracks kept beside the object; the plain `en` one used.
    let media = &table_rows_file_all(&out.join("download"))[0]["path"];
    let stem = media.strip_suffix(".mp4").unwrap();
    for lang in ["en", "en-orig"] {
        assert!(out.join(format!("{stem}.{lang}.json3")).exists(), "{lang}");
    }
    assert_eq!(asr.server.requests().len(), 0);
    let rows = table_rows_file_all(&out.join("transcript"));
    assert_eq!(rows.len(), 1, "{rows:#?}");
    assert_eq!(rows[0]["text"], "never gonna give you up");
    assert_eq!(rows[0]["source"], "captions:youtube");
    assert_eq!(rows[0]["language"], "en");
    assert_eq!(
        (rows[0]["start_secs"].as_str(), rows[0]["end_secs"].as_str()),
        ("0.1", "1.0")
    );
}
