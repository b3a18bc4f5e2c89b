//! Build information: the commit this build came from (`RL_GIT_COMMIT`).

include!("../build-info/commit.rs");

fn main() {
    emit_git_commit();
}
