"""One router per resource: trainings, models, files, workspaces, studies, and the verifier."""
