//! Part of `run --dry-run`: a stage that sends frames to a model its server lists as taking
//! text only would reject every video (`images_not_supported`). The dry run asks each such
//! service's model list (`GET {base_url}models`, free, a few seconds at most, all at once) and
//! says so before anything is paid for. Only servers that list modalities (llama.cpp's) can
//! be caught; the others say nothing and are not warned about.

use crate::clients::llm::LlmService;
use crate::config::{ServiceConfig, ServiceMode};
use crate::runtime::chain::PlannedStage;
use std::collections::BTreeMap;
use std::time::Duration;

/// How long the dry run waits for a model list: a server that is not up is no reason to wait.
const ASK_FOR: Duration = Duration::from_secs(3);

/// One line for each stage that sends images to a model whose server lists no image input.
pub async fn text_only_warnings(
    stages: &[PlannedStage],
    services: &BTreeMap<String, ServiceConfig>,
) -> Vec<String> {
    // (service, model) -> the stages sending it images.
    let mut asked: BTreeMap<(String, String), Vec<String>> = BTreeMap::new();
    for st in stages {
        for call in st.task.estimate().calls {
            if call.images > 0 {
                let who = asked.entry((call.service, call.model)).or_default();
                if !who.contains(&st.id) {
                    who.push(st.id.clone());
                }
            }
        }
    }
    let answers = futures::future::join_all(asked.into_iter().map(|((svc, model), who)| {
        // A service answering from its cache or in batches is not asked anything now.
        let cfg = services
            .get(&svc)
            .filter(|c| c.mode == ServiceMode::Live)
            .cloned();
        async move {
            let service = LlmService::new(&svc, &cfg?).ok()?;
            let takes = service.input_modalities(&model, ASK_FOR).await?;
            (!takes.iter().any(|m| m == "image")).then_some((svc, model, takes, who))
        }
    }))
    .await;
    let mut out = vec![];
    for (svc, model, takes, who) in answers.into_iter().flatten() {
        for stage in who {
            out.push(format!(
                "stage `{stage}` sends frames to `{model}` of service `{svc}`, whose model list says it takes {} only: every video would be rejected (images_not_supported); point the stage at a vision model (llama.cpp: start the server with the model's --mmproj)",
                takes.join(", ")
            ));
        }
    }
    out
}
