"""The names of a run's metrics, defined once: the keys of the records of ``metrics.jsonl``
and of ``final_metrics.json``. Training writes them, the sweep's status and report read
them; both import the names from here.

``metrics.jsonl`` holds one JSON object a logged step and split::

    {"split": "train", "step": 100, "loss": 5.1, "tokens_per_s": 2400.0, ...}

``final_metrics.json`` is written once, when a run has finished: the last validation
figures, the test BLEU and where the test translations are; or when it stopped itself
(diverged, or its Optuna trial pruned): its step, the last validation figures and STOPPED.
"""

# Every record of metrics.jsonl.
SPLIT = "split"  # TRAIN, EVAL or TEST
STEP = "step"  # the optimizer step (also final_metrics.json's: the run's last step)
TRAIN, EVAL, TEST = "train", "eval", "test"

# Figures of the TRAIN records: over the steps since the last record.
LOSS = "loss"  # per target token: label-smoothed (train), unsmoothed (eval, final)
PERPLEXITY = "perplexity"  # exp(NLL per target token), unsmoothed
LEARNING_RATE = "learning_rate"
TOKENS_PER_S = "tokens_per_s"  # target tokens trained a second
SOURCE_TOKENS_PER_S = "source_tokens_per_s"
STEPS_PER_S = "steps_per_s"
PADDING_FRACTION = "padding_fraction"  # of the batches' target positions
MFU = "mfu"  # model FLOPs utilisation, when the peak is known
GRAD_NORM = "grad_norm"  # global gradient norm of the last step
SKIPPED_LONG_PAIRS = "skipped_long_pairs"  # training pairs left out as too long, so far
NONFINITE_STEPS = "nonfinite_steps"  # steps skipped for non-finite values, so far

# Figures of the EVAL records (the validation split; the last also in final_metrics.json).
NLL = "nll"  # negative log-likelihood per target token
TOKENS = "tokens"  # target tokens evaluated
BLEU = "bleu"  # sacreBLEU of the first train.bleu_sentences (eval), of the test split (test)
BLEU_TOKENIZED = "bleu_tokenized"  # tokenized, compound-split BLEU of the test split (test)

# Only in final_metrics.json (besides STEP and the last EVAL figures).
AVERAGED_STEPS = "averaged_steps"  # the checkpoint steps averaged into the evaluated model
TEST_BLEU = "test_bleu"  # sacreBLEU of the first BLEU_SENTENCES of the test split
BLEU_SIGNATURE = "bleu_signature"  # sacreBLEU's signature of TEST_BLEU
TEST_BLEU_TOKENIZED = "test_bleu_tokenized"  # tokenized, compound-split BLEU, as the paper
BLEU_TOKENIZED_SIGNATURE = "bleu_tokenized_signature"
BLEU_SENTENCES = "bleu_sentences"  # test sentences translated
TEST_HYPOTHESES = "test_hypotheses"  # their translations, one a line (relative to the workdir)
TEST_REFERENCES = "test_references"  # their references, likewise
# Only in the final_metrics.json of a run that stopped itself (training/stops.py), whose STEP
# is then the step it stopped at: {"reason": "diverged" or "pruned", "step": N,
# "message": "pruned at step N (...)"}.
STOPPED = "stopped"

# The validation figures an Optuna trial reports as its objective (search.objective), and
# those better when higher: a study maximizes these, minimizes the others.
OBJECTIVES = (LOSS, NLL, PERPLEXITY, BLEU)
HIGHER_IS_BETTER = (BLEU,)

# The keys each kind of record may hold.
RECORD_KEYS = {
    TRAIN: (SPLIT, STEP, LOSS, PERPLEXITY, LEARNING_RATE, TOKENS_PER_S, SOURCE_TOKENS_PER_S,
            STEPS_PER_S, PADDING_FRACTION, MFU, GRAD_NORM, SKIPPED_LONG_PAIRS, NONFINITE_STEPS),
    EVAL: (SPLIT, STEP, LOSS, NLL, PERPLEXITY, TOKENS, BLEU),
    TEST: (SPLIT, STEP, BLEU, BLEU_TOKENIZED),
}
FINAL_KEYS = (STEP, LOSS, NLL, PERPLEXITY, TOKENS, AVERAGED_STEPS, TEST_BLEU, BLEU_SIGNATURE,
              TEST_BLEU_TOKENIZED, BLEU_TOKENIZED_SIGNATURE, BLEU_SENTENCES, TEST_HYPOTHESES,
              TEST_REFERENCES, STOPPED)
