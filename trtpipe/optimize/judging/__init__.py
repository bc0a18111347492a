"""Accuracy judging: the task figure on data (evaluate), the data that judges without --eval (held_out), the one rule
that keeps or drops a step (step_rule), and the budgets a run spends (sample_plan, work)."""
