//! Drafted references (MVFNDB Figure 4): model A drafts, model B refines, a judge scores each
//! refinement's factual consistency and logical rationality 0–5, and a score under the
//! threshold sends the item back to model B with the judge's reasons (`benchmark::rounds`).
//!
//! Every answer follows a schema built here from the task's format, is checked by the format's
//! own parser (`benchmark::formats`), and gets one repair naming the problem; an answer still
//! wrong rejects the item, not the video. Every round is returned for the row.

use super::{ItemsConfig, ModelRef, Models, ROLES};
use crate::benchmark::formats::{AnswerContext, Format, Problem, option_label};
use crate::benchmark::rounds::{Judgment, LoopRule, Next, Round, next};
use crate::benchmark::task::Task;
use crate::clients::llm::{ChatRequest, ImageInput};
use crate::config::{ConfigError, Seg, StageCommon};
use crate::error::StageError;
use crate::stages::BuildCx;
use crate::stages::model_call::Call;
use crate::stages::structured::{OutputSchema, SchemaProblem};
use serde_json::{Value, json};
use std::path::Path;

/// The reference's schema for a task's format: what model A drafts and model B refines.
pub fn draft_schema(task: &Task) -> OutputSchema {
    let strings = json!({"type": "array", "items": {"type": "string"}});
    let mut props = serde_json::Map::new();
    let mut required: Vec<String> = vec![];
    let mut add = |k: &str, v: Value| {
        props.insert(k.to_string(), v);
        required.push(k.to_string());
    };
    let fields = &task.file.reference.fields;
    match task.format {
        Format::SingleChoice => add(
            "answer",
            json!({"type": "string", "description": "the option's label"}),
        ),
        Format::MultipleChoice => add(
            "answer",
            json!({"type": "array", "items": {"type": "string"}, "description": "every right option's letter"}),
        ),
        Format::Count => add("answer", json!({"type": "integer"})),
        Format::TimeRanges => add(
            "answer",
            json!({"type": "array", "items": {"type": "array", "items": {"type": "number"}}, "description": "[[start, end], ...] in seconds"}),
        ),
        Format::ReferenceList => {}
        Format::OpenText => {
            if fields.is_empty() {
                add("answer", json!({"type": "string"}));
            }
        }
        Format::TaggedReasoning => add(
            "answer",
            json!({"type": "string", "description": "<think>...</think><result>label</result>"}),
        ),
    }
    for f in fields {
        let v = if task.format == Format::OpenText {
            json!({"type": "string"})
        } else {
            strings.clone()
        };
        add(f, v);
    }
    add("rationale", json!({"type": "string"}));
    let schema = json!({
        "type": "object",
        "properties": props,
        "required": required,
        "additionalProperties": false,
    });
    OutputSchema::new(
        &format!("{}_reference", task.file.name),
        schema,
        Path::new("(built from the task file)"),
    )
    .expect("a valid schema")
}

/// The judge's schema: two scores 0–5, each with its reason.
pub fn judge_schema() -> OutputSchema {
    let score = json!({"type": "integer", "minimum": 0, "maximum": 5});
    let schema = json!({
        "type": "object",
        "properties": {
            "factual_consistency": score,
            "factual_reason": {"type": "string"},
            "logical_rationality": score,
            "logical_reason": {"type": "string"},
        },
        "required": ["factual_consistency", "factual_reason", "logical_rationality", "logical_reason"],
        "additionalProperties": false,
    });
    OutputSchema::new("item_judgment", schema, Path::new("(built in)")).expect("a valid schema")
}

/// The three models of a drafted task (`given`: each role's configured model), each with its
/// role's prompt and schema.
pub(super) fn drafted_models(
    cfg: &ItemsConfig,
    task: &Task,
    given: [(&str, &Option<ModelRef>); 3],
    common: &StageCommon,
    compute_at: &[Seg],
    bcx: &BuildCx,
) -> Result<Models, ConfigError> {
    let at = |k: &str| crate::config::key_at(compute_at, k);
    crate::stages::model_inputs::images_at_least_one(cfg.max_images, compute_at, bcx)?;
    let mut callers = vec![];
    for (k, m) in given {
        let Some(m) = m else {
            return Err(bcx.src.error_at(
                compute_at,
                format!(
                    "task {} is drafted: name its {k} = {{ service, model }}",
                    task.file.name
                ),
            ));
        };
        let svc = bcx.llm_service(&m.service, &at(k), common)?;
        // The judge reads the refined item, not the video.
        let judge = k == "judge";
        callers.push(Call {
            svc,
            model: m.model.clone(),
            prompt: task
                .prompt(ROLES[callers.len()])
                .unwrap_or_default()
                .to_string(),
            schema: Some(if judge {
                judge_schema()
            } else {
                draft_schema(task)
            }),
            max_images: if judge { 0 } else { cfg.max_images },
            max_transcript_chars: cfg.max_transcript_chars,
            max_tokens: cfg.max_tokens,
            temperature: cfg.temperature,
        });
    }
    let judge = callers.pop().expect("three callers");
    let refiner = callers.pop().expect("three callers");
    let drafter = callers.pop().expect("three callers");
    Ok(Models {
        drafter,
        refiner,
        judge,
    })
}

/// What a draft is checked against: the options, the video's duration, the dataset's label.
pub struct DraftContext<'a> {
    pub options: &'a [String],
    pub duration_secs: Option<f64>,
    /// The right label of a tagged_reasoning task (its `label_column`), when the video has one.
    pub label: Option<&'a str>,
}

/// Checks a draft beyond its schema: the answer in the format's terms, the reference lists not
/// empty, a tagged result equal to the dataset's label.
pub fn check_draft(task: &Task, v: &Value, cx: &DraftContext) -> Result<(), Problem> {
    let labels = &task.file.labels;
    let acx = AnswerContext {
        options: cx.options,
        duration_secs: cx.duration_secs,
        labels,
    };
    if let Some(answer) = v.get("answer") {
        let parsed = task.format.parse(answer, &acx)?;
        if let (crate::benchmark::formats::Answer::Tagged { result, .. }, Some(want)) =
            (&parsed, cx.label)
            && !result.eq_ignore_ascii_case(want)
        {
            return Err(Problem {
                code: "wrong_label",
                message: format!(
                    "<result>{result}</result> is not the video's verified label {want}"
                ),
            });
        }
    }
    for f in &task.file.reference.fields {
        let empty = match &v[f.as_str()] {
            Value::Array(a) => a
                .iter()
                .all(|x| x.as_str().is_none_or(|s| s.trim().is_empty())),
            Value::String(s) => s.trim().is_empty(),
            _ => true,
        };
        if empty {
            return Err(Problem {
                code: "empty_reference",
                message: format!("`{f}` is empty: the reference needs at least one entry"),
            });
        }
    }
    Ok(())
}

/// The options as a prompt lists them ("A. …").
pub fn options_text(options: &[String]) -> String {
    options
        .iter()
        .enumerate()
        .map(|(i, o)| format!("{}. {o}", option_label(i, options.len())))
        .collect::<Vec<_>>()
        .join("\n")
}

/// One item's loop, from the draft to a decision. Each role is a `Call` with its own prompt
/// and schema (drafter and refiner: the reference's; judge: the judgment's).
pub struct Loop<'a> {
    pub task: &'a Task,
    pub drafter: &'a Call,
    pub refiner: &'a Call,
    pub judge: &'a Call,
    pub rule: LoopRule,
    pub images: Vec<ImageInput>,
}

/// How a loop ended: its rounds and the decision (the kept round, or the rejection).
pub struct Ended {
    pub rounds: Vec<Round>,
    pub kept: Option<u32>,
    /// (code, reason) of a rejection.
    pub rejected: Option<(String, String)>,
}

impl Loop<'_> {
    fn request(&self, c: &Call, prompt: String, images: bool) -> ChatRequest {
        c.request(prompt, if images { self.images.clone() } else { vec![] })
    }

    /// A role's prompt (`draft`, `refine`, `judge`) for this video, `[draft]` and `[reasons]`
    /// filled.
    fn prompt(
        &self,
        fill: &(dyn Fn(&str) -> String + Sync),
        role: &str,
        draft: &str,
        reasons: &str,
        round: usize,
    ) -> String {
        // The round is in the text: a refinement or judgment repeated word for word is a new
        // request, not the response cache's answer to the round before.
        let p = fill(self.task.prompt(role).unwrap_or_default())
            .replace("[draft]", draft)
            .replace("[reasons]", reasons);
        if round == 0 {
            p
        } else {
            format!("{p}\n\n(Round {round}.)")
        }
    }

    /// A drafted or refined answer as the row keeps it, or why it is refused; the refusal's
    /// code is left in `last_code`.
    fn check_answer(
        &self,
        t: &str,
        dcx: &DraftContext<'_>,
        last_code: &std::sync::Mutex<&'static str>,
    ) -> Result<String, AnswerProblem> {
        let note = |code: &'static str| *last_code.lock().unwrap_or_else(|e| e.into_inner()) = code;
        let v = self.drafter.check(t).map_err(|e| {
            note("breaks_schema");
            AnswerProblem::Schema(e)
        })?;
        check_draft(self.task, &v, dcx).map_err(|p| {
            note(p.code);
            AnswerProblem::Format(p)
        })?;
        Ok(v.to_string())
    }

    /// Runs the loop. `fill` fills a prompt's places for this video (`[draft]` and `[reasons]`
    /// are filled here); `dcx` checks each draft.
    pub async fn run(
        &self,
        fill: &(dyn Fn(&str) -> String + Sync),
        dcx: &DraftContext<'_>,
        cx: &crate::runtime::stage::StageContext,
    ) -> Result<Ended, StageError> {
        let prompt = |role: &str, draft: &str, reasons: &str, round: usize| {
            self.prompt(fill, role, draft, reasons, round)
        };
        let mut rounds: Vec<Round> = vec![];
        // The format's code of the last problem: what a rejected item's row names.
        let last_code = std::sync::Mutex::new("breaks_schema");
        let check = |t: &str| self.check_answer(t, dcx, &last_code);
        loop {
            let step = next(&rounds, &self.rule);
            let (caller, role, req) = match &step {
                Next::Keep { round } => {
                    return Ok(Ended {
                        rounds,
                        kept: Some(*round),
                        rejected: None,
                    });
                }
                Next::Reject { reasons } => {
                    let why = ("judged_below".to_string(), reasons.clone());
                    return Ok(Ended {
                        rounds,
                        kept: None,
                        rejected: Some(why),
                    });
                }
                Next::Judge => {
                    let last = rounds.last().map(|r| r.text.clone()).unwrap_or_default();
                    let j = self
                        .ask_judge(&prompt("judge", &last, "", rounds.len() - 1), cx)
                        .await;
                    match j {
                        Ok(j) => {
                            if let Some(r) = rounds.last_mut() {
                                r.judgment = Some(j);
                            }
                            continue;
                        }
                        Err(e) => return rejected(rounds, e),
                    }
                }
                Next::Refine { .. } if rounds.is_empty() => (
                    self.drafter,
                    "draft",
                    self.request(self.drafter, prompt("draft", "", "", 0), true),
                ),
                Next::Refine { reasons } => {
                    let last = rounds.last().map(|r| r.text.clone()).unwrap_or_default();
                    let p = prompt("refine", &last, reasons, rounds.len());
                    (self.refiner, "refine", self.request(self.refiner, p, true))
                }
            };
            match ask_reference(caller, req, cx, check).await {
                Ok(text) => rounds.push(Round {
                    round: rounds.len() as u32,
                    role: role.into(),
                    model: caller.model.clone(),
                    text,
                    judgment: None,
                }),
                Err(e) => return rejected(rounds, named_by(e, &last_code)),
            }
        }
    }

    async fn ask_judge(
        &self,
        prompt: &str,
        cx: &crate::runtime::stage::StageContext,
    ) -> Result<Judgment, StageError> {
        let req = self.request(self.judge, prompt.to_string(), false);
        let a = crate::stages::model_inputs::ask_validated(
            &self.judge.svc,
            req,
            cx,
            "invalid_judgment",
            |t| {
                let v = self.judge.check(t).map_err(|e| e.to_string())?;
                serde_json::from_value::<Judgment>(v).map_err(|e| e.to_string())
            },
            |problem| format!("Your previous answer was invalid: {problem}. Reply with only the JSON object of the two scores and their reasons."),
        )
        .await?;
        Ok(a.value)
    }
}

/// A loop that ended on a call's error: a data error (an answer still invalid after its repair,
/// a refusal) rejects the item with its reason; any other error (a service that stays down) is
/// the video's, for the runtime to retry.
fn rejected(rounds: Vec<Round>, e: StageError) -> Result<Ended, StageError> {
    if e.kind != crate::error::ErrorKind::Data {
        return Err(e);
    }
    Ok(Ended {
        rounds,
        kept: None,
        rejected: Some((e.reason.clone(), e.detail.clone())),
    })
}

/// Asks `caller` for a draft or a refinement, repaired once when `check` refuses it; the
/// answer as `check` keeps it.
async fn ask_reference(
    caller: &Call,
    req: ChatRequest,
    cx: &crate::runtime::stage::StageContext,
    check: impl Fn(&str) -> Result<String, AnswerProblem>,
) -> Result<String, StageError> {
    let a = crate::stages::model_inputs::ask_validated(
        &caller.svc,
        req,
        cx,
        "invalid_reference",
        check,
        |problem| format!("Your previous answer was invalid: {problem}. Reply with only the JSON object the schema describes, the problem fixed."),
    )
    .await?;
    Ok(a.value)
}

/// Why a drafted or refined answer is refused: it breaks the schema, or the format's check.
#[derive(Debug, thiserror::Error)]
enum AnswerProblem {
    #[error(transparent)]
    Schema(SchemaProblem),
    #[error(transparent)]
    Format(Problem),
}

/// A call's error with an answer still invalid after its repair renamed by the format's code
/// of the last problem (`last_code`).
fn named_by(mut e: StageError, last_code: &std::sync::Mutex<&'static str>) -> StageError {
    if e.reason == "invalid_reference" {
        e.reason = last_code
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .to_string();
    }
    e
}
