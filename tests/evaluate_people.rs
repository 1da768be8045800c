//! The judge's agreement with people, through a real Label Studio: `evaluate --people-out`
//! writes the judging project, Label Studio (tests/annotate.rs starts it) validates its config
//! and imports its tasks, two people's judgments are posted through its API
//! (tests/readers/label_studio_judging.py), and `evaluate --judge … --people EXPORT.json` prints
//! kappa / alpha equal to the values worked out by hand below, with the bad annotations named.

use crate::annotate::drive_label_studio;
use crate::caption::openai_structured;
use crate::evaluate_tasks::py;
use crate::fake_http::{FakeServer, Request, Response};
use crate::judge::{OPENAI_KEY, prompt_of};
use crate::util::*;
use serde_json::{Value, json};
use std::collections::BTreeSet;
use std::process::{Command, Output};

fn words(s: &str) -> BTreeSet<String> {
    s.to_lowercase()
        .split(|c: char| !c.is_ascii_alphabetic())
        .filter(|w| !w.is_empty())
        .map(String::from)
        .collect()
}

/// The stand-in judge of this test (not a model; label_studio_judging.py replays its rule): an
/// element is stated when it shares a word with the answer; an element with "smoke" is never
/// answered in JSON (unjudged after its repair); every rating is the answer's word count, at
/// most 5, in both samples.
fn word_judge(r: &Request) -> Response {
    let v: Value = serde_json::from_slice(&r.body).unwrap();
    let prompt = prompt_of(r);
    let answer = |end: &str| -> String {
        let rest = prompt.split("The answer:\n").nth(1).unwrap();
        rest.split(end).next().unwrap().to_string()
    };
    if let Some(rest) = prompt.split("Reference element: ").nth(1) {
        let element = rest.split('\n').next().unwrap();
        if element.to_lowercase().contains("smoke") {
            return openai_structured("I would rather not say.");
        }
        let hit = !words(element).is_disjoint(&words(&answer("\n\nDoes the answer")));
        return openai_structured(&json!({"hit": hit, "reason": "read"}).to_string());
    }
    let n = answer("\n\nRate on").split_whitespace().count().min(5);
    let mut out = serde_json::Map::new();
    for k in v["response_format"]["json_schema"]["schema"]["properties"]
        .as_object()
        .unwrap()
        .keys()
        .filter(|k| *k != "reason")
    {
        out.insert(k.clone(), json!(n));
    }
    out.insert("reason".into(), json!("counted"));
    openai_structured(&Value::Object(out).to_string())
}

fn close(v: &Value, want: f64) -> bool {
    v.as_f64().is_some_and(|x| (x - want).abs() < 1e-9)
}

/// The lines of `text` from the one starting with `head` (trimmed) to the next metric's.
fn block<'a>(text: &'a str, head: &str) -> Vec<&'a str> {
    let mut lines = text
        .lines()
        .skip_while(|l| !l.trim_start().starts_with(head));
    let first = lines
        .next()
        .unwrap_or_else(|| panic!("no {head:?} in {text}"));
    std::iter::once(first)
        .chain(lines.take_while(|l| l.starts_with("      ")))
        .collect()
}

#[test]
fn the_judge_against_two_people_judging_in_label_studio() {
    let d = tempfile::tempdir().unwrap();
    let rel = d.path().join("rel");
    let r = rel.to_str().unwrap();
    py(&["make", r, "31"]);
    let preds = rel.join("predictions.jsonl");
    let p = preds.to_str().unwrap();
    let server = FakeServer::start(word_judge);
    let judge = d.path().join("judge.toml");
    write(
        &judge,
        &format!(
            "[services.judge]\nbase_url = \"{}v1/\"\napi_key_env = \"VIDCURATE_TEST_OPENAI_KEY\"\nrequests_per_minute = 6000\n\n[judge]\nservice = \"judge\"\nmodel = \"word-judge\"\nsamples = 2\n",
            server.url()
        ),
    );
    let j = judge.to_str().unwrap();
    let evaluate = |extra: &[&str]| -> Output {
        Command::new(bin())
            .args(["evaluate", r, p])
            .args(extra)
            .current_dir(d.path())
            .env("VIDCURATE_TEST_OPENAI_KEY", OPENAI_KEY)
            .output()
            .unwrap()
    };
    let ok = |o: &Output| {
        assert_eq!(
            o.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    let project = d.path().join("project");
    let said = ok(&evaluate(&[
        "--judge",
        j,
        "--people-out",
        project.to_str().unwrap(),
    ]));
    assert!(said.contains("tasks for people"), "{said}");
    assert_eq!(
        server.requests().len(),
        0,
        "writing the project judges nothing"
    );

    // Bad flags and a broken export exit 2, naming the flag or the file and line.
    let broken = d.path().join("broken.json");
    write(&broken, "[\n  {\"id\": 1,\n  oops\n]");
    for (args, want) in [
        (vec!["--people", "x.json"], "--judge"),
        (
            vec!["--judge", j, "--people", "x.json", "--people-out", "o"],
            "--people-out",
        ),
        (
            vec!["--judge", j, "--people", broken.to_str().unwrap()],
            "broken.json:3",
        ),
    ] {
        let o = evaluate(&args);
        let e = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {e}");
        assert!(e.contains(want), "{want} not in {e}");
    }

    let export = d.path().join("export.json");
    let driven = drive_label_studio(
        d.path(),
        "label_studio_judging.py",
        &[project.to_str().unwrap(), export.to_str().unwrap()],
    );
    let (a, b) = (driven["a"].to_string(), driven["b"].to_string());
    let o = evaluate(&["--judge", j, "--people", export.to_str().unwrap(), "--json"]);
    let report: Value = serde_json::from_str(&ok(&o)).unwrap();
    let people = &report["people"];
    let mut both = vec![a.clone(), b.clone()];
    both.sort();
    assert_eq!(people["people"], json!(both), "{people}");
    assert_eq!(people["cancelled"], 1, "{people}");
    assert_eq!(people["annotations"], driven["annotations"], "{people}");
    assert_eq!(people["judgments"], driven["judgments"], "{people}");
    assert_eq!(people["tasks"], driven["tasks"], "{people}");
    // Every planted bad annotation named by its task and field, and nothing else.
    let ids = &driven["task_ids"];
    let mut named: Vec<(i64, String)> = people["problems"]
        .as_array()
        .unwrap()
        .iter()
        .map(|q| {
            (
                q["task_id"].as_i64().unwrap(),
                q["field"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    named.sort();
    let mut want: Vec<(i64, String)> = [
        ("maybe", "hit_0"),
        ("short", "hit_2"),
        ("unknown_item", "data.item_id"),
        ("seven", "completeness"),
        ("unknown_model", "data.model"),
    ]
    .iter()
    .map(|(k, f)| (ids[k].as_i64().unwrap(), f.to_string()))
    .collect();
    want.sort();
    assert_eq!(named, want, "{people}");

    let task = |name: &str| {
        report["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["task"] == name)
            .unwrap()
            .clone()
    };
    // Hits: the judge says hit on 4 units and miss on 4; a agrees on all, b flips one of each.
    // Judge vs a: kappa 1 on 8. Judge vs b: p_o = 6/8, both 4 hits / 4 misses so p_e = 1/2:
    // (0.75 − 0.5) / 0.5 = 0.5. The majority: the 2 flipped units tie and are left out, the 6
    // left agree (3 hits, 3 misses): 1 on 6. a vs b on those 8 and the smoke unit the judge
    // left unjudged (a hit, b miss): p_o = 6/9, a 5 hits of 9, b 4: p_e = 40/81, kappa
    // (54 − 40) / (81 − 40) = 14/41.
    let rl = task("rl");
    let g = &rl["people_agreement"]["hit_rate.elements"];
    assert_eq!(g["measure"], "Cohen's kappa", "{g}");
    assert_eq!(g["per_person"][&a], json!({"value": 1.0, "n": 8}), "{g}");
    assert_eq!(g["per_person"][&b], json!({"value": 0.5, "n": 8}), "{g}");
    assert_eq!(g["consensus"], "majority");
    assert_eq!(g["with_consensus"], json!({"value": 1.0, "n": 6}), "{g}");
    assert_eq!(g["ties"], 2, "{g}");
    assert!(close(&g["among_people"]["value"], 14.0 / 41.0), "{g}");
    assert_eq!(g["among_people"]["n"], 9, "{g}");
    assert_eq!(
        (&g["judged_by_people"], &g["unjudged_by_judge"]),
        (&json!(9), &json!(1))
    );
    // Completeness: the judge rates 1, 2, 3, 4; a the same, b 2, 2, 3, 5. Judge vs b: the
    // values 1 2 | 2 2 | 3 3 | 4 5 differ within units by 1 twice: D_o = (2·1 + 2·1) / 8; over
    // all 56 ordered pairs of the 8 values the squared differences sum to 2·(8·72 − 22²) = 184,
    // D_e = 184/56: alpha = 1 − 0.5 · 56/184 = 39/46. Judge vs the mean (1.5, 2, 3, 4.5):
    // D_o = (2·0.25 + 2·0.25) / 8, pairs 2·(8·65.5 − 21²) = 166: 1 − 7/166 = 159/166. a vs b
    // are the judge vs b: 39/46.
    let ot = task("ot");
    let g = &ot["people_agreement"]["completeness"];
    assert_eq!(g["measure"], "Krippendorff's alpha (interval)", "{g}");
    assert_eq!(g["per_person"][&a], json!({"value": 1.0, "n": 4}), "{g}");
    assert!(close(&g["per_person"][&b]["value"], 39.0 / 46.0), "{g}");
    assert_eq!(g["consensus"], "mean");
    assert!(close(&g["with_consensus"]["value"], 159.0 / 166.0), "{g}");
    assert!(close(&g["among_people"]["value"], 39.0 / 46.0), "{g}");
    assert_eq!(g["unjudged_by_judge"], 0, "{g}");
    // The judge against itself still beside them: the rule gives both samples the same.
    assert_eq!(rl["self_agreement"]["hit_rate.elements"], 1.0, "{rl}");

    // The table says the same, next to the judged scores.
    let calls = server.requests().len();
    let text = ok(&evaluate(&[
        "--judge",
        j,
        "--people",
        export.to_str().unwrap(),
    ]));
    assert_eq!(
        server.requests().len(),
        calls,
        "the judge's verdicts come from its cache"
    );
    let hits = block(&text, "rl: hit_rate.elements: the judge agrees with people");
    for line in [
        format!("judge vs {a}: 1.000 (n 8)"),
        format!("judge vs {b}: 0.500 (n 8)"),
        "judge vs the people's majority: 1.000 (n 6); 2 tie(s) without a majority left out"
            .to_string(),
        "people among themselves: 0.341 (n 9)".to_string(),
        "1 of 9 judgment(s) people made the judge left unjudged: not compared".to_string(),
    ] {
        assert!(
            hits.iter().any(|l| l.trim() == line),
            "{line:?} not in {hits:#?}"
        );
    }
    let rated = block(&text, "ot: completeness: the judge agrees with people");
    for line in [
        format!("judge vs {a}: 1.000 (n 4)"),
        format!("judge vs {b}: 0.848 (n 4)"),
        "judge vs the people's mean: 0.958 (n 4)".to_string(),
        "people among themselves: 0.848 (n 4)".to_string(),
    ] {
        assert!(
            rated.iter().any(|l| l.trim() == line),
            "{line:?} not in {rated:#?}"
        );
    }
    assert!(
        text.contains("rl: hit_rate.elements: the judge agrees with itself over two samples"),
        "{text}"
    );
    for (k, why) in [
        ("maybe", "hit_0: \"maybe\" is not hit or miss"),
        ("seven", "completeness: \"7\" is not a rating from 0 to 5"),
        ("unknown_item", "data.item_id: unknown item"),
        ("unknown_model", "data.model: unknown model"),
        ("short", "hit_2: the item has"),
    ] {
        let at = format!("export.json: task {} (", ids[k]);
        assert!(
            text.lines().any(|l| l.contains(&at) && l.contains(why)),
            "{at}…{why} not in {text}"
        );
    }
    assert!(text.contains("1 cancelled (kept out)"), "{text}");
}
