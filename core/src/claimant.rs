//! What claims capacity in an admission plan: a training job, or a playground standing in the
//! queue as a one-machine job (docs/design.md §8). The plan carries the kind with every admission
//! and every wait, so the reconciler routes each to its own step and every message names what a
//! person asked for.

/// The plugin of a playground's stand-in job ([`crate::playground::admission_stand_in`]); no
/// submitted spec may name it (the spec's plugins are checked at submission).
pub const PLAYGROUND_PLUGIN: &str = "playground/vllm";

/// The kind of thing that holds GPUs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Claimant {
    /// A submitted job (or an array's child).
    #[default]
    Job,
    /// A playground: interactive, without checkpoints, so it neither preempts nor is preempted.
    Playground,
}

impl Claimant {
    /// The kind a stand-in or a submitted job with `plugin` is.
    pub fn of_plugin(plugin: &str) -> Claimant {
        if plugin == PLAYGROUND_PLUGIN {
            Claimant::Playground
        } else {
            Claimant::Job
        }
    }

    /// The noun a message uses: "job" or "playground".
    pub fn noun(self) -> &'static str {
        match self {
            Claimant::Job => "job",
            Claimant::Playground => "playground",
        }
    }

    /// Whether it takes part in preemption, on either side.
    pub fn preempts(self) -> bool {
        self == Claimant::Job
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_stand_ins_plugin_is_a_playground() {
        assert_eq!(Claimant::of_plugin(PLAYGROUND_PLUGIN), Claimant::Playground);
        assert_eq!(Claimant::of_plugin("custom/custom"), Claimant::Job);
        assert_eq!(Claimant::of_plugin("playground/other"), Claimant::Job);
        assert_eq!(Claimant::Playground.noun(), "playground");
        assert!(Claimant::Job.preempts() && !Claimant::Playground.preempts());
    }
}
