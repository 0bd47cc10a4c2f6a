"""BLEU two ways: corpus BLEU worked out by hand, sacreBLEU's figures, the tokenized,
compound-split BLEU of the 2017 papers, and the compound split itself."""

import math

import pytest
import sacrebleu

from transformer_jax.evaluation import bleu

# ----------------------------------------------------------------------------------------
# Corpus BLEU by hand: BLEU = BP * (p1 * p2 * p3 * p4) ** (1/4), p_n the clipped n-gram
# matches of the whole corpus over its hypothesis n-grams, BP = exp(1 - r/c) for a
# hypothesis length c below the reference length r.

EN_HYPS = ["the cat sat on the mat", "he reads a good book"]
EN_REFS = ["the cat sat on a mat", "he reads a very good book"]
# Sentence 1, 6 hypothesis tokens against 6:
#   1-grams: the (2 in the hypothesis, clipped to the reference's 1), cat, sat, on, mat: 5/6
#   2-grams: "the cat", "cat sat", "sat on" match; "on the", "the mat" do not: 3/5
#   3-grams: "the cat sat", "cat sat on" match; "sat on the", "on the mat" do not: 2/4
#   4-grams: "the cat sat on" matches; "cat sat on the", "sat on the mat" do not: 1/3
# Sentence 2, 5 hypothesis tokens against 6 ("very" missing):
#   1-grams: he, reads, a, good, book: 5/5
#   2-grams: "he reads", "reads a", "good book" match; "a good" does not: 3/4
#   3-grams: "he reads a" matches; "reads a good", "a good book" do not: 1/3
#   4-grams: "he reads a good", "reads a good book" do not: 0/2
# Corpus: p1 = 10/11, p2 = 6/9, p3 = 3/7, p4 = 1/5; their product is 60/1155 = 4/77.
# c = 11, r = 12: BP = exp(1 - 12/11) = exp(-1/11) = 0.91310.
# BLEU = 0.91310 * (4/77) ** 0.25 = 0.91310 * 0.47741 = 0.43592: 43.59.
EN_BLEU = 100 * math.exp(-1 / 11) * (4 / 77) ** 0.25


def test_bleu_is_the_corpus_bleu_worked_out_by_hand():
    assert round(EN_BLEU, 2) == 43.59
    score, _ = bleu.bleu(EN_HYPS, EN_REFS)
    assert score == pytest.approx(EN_BLEU, abs=1e-2)
    # Lower-case words without punctuation or hyphens: the Moses tokenizer leaves them as
    # they are, and the tokenized figure is the same.
    assert bleu.tokenized_bleu(EN_HYPS, EN_REFS, "en")[0] == pytest.approx(EN_BLEU, abs=1e-2)


DE_HYPS = ["Der Auto-Fahrer fährt schnell.", "Die Lkw-Fahrer warten."]
DE_REFS = ["Der Auto-Fahrer fährt sehr schnell.", "Die Bus-Fahrer warten."]
# As the paper's script scores them: Moses-tokenized (the final period split off), then
# every hyphen inside a word split out as ##AT##-##AT## (written @ below):
#   "Der Auto @ Fahrer fährt schnell ."  against  "Der Auto @ Fahrer fährt sehr schnell ."
#   "Die Lkw @ Fahrer warten ."          against  "Die Bus @ Fahrer warten ."
# Sentence 1, 7 tokens against 8 ("sehr" missing):
#   1-grams: all 7 match: 7/7
#   2-grams: Der Auto, Auto @, @ Fahrer, Fahrer fährt, schnell . match; fährt schnell
#   does not: 5/6
#   3-grams: Der Auto @, Auto @ Fahrer, @ Fahrer fährt match; Fahrer fährt schnell,
#   fährt schnell . do not: 3/5
#   4-grams: Der Auto @ Fahrer, Auto @ Fahrer fährt match; @ Fahrer fährt schnell,
#   Fahrer fährt schnell . do not: 2/4
# Sentence 2, 6 tokens against 6: only the compounds' first halves differ, and the split
# lets "@ Fahrer" match although "Lkw-Fahrer" is not "Bus-Fahrer":
#   1-grams: Die, @, Fahrer, warten, . match; Lkw does not: 5/6
#   2-grams: @ Fahrer, Fahrer warten, warten . match; Die Lkw, Lkw @ do not: 3/5
#   3-grams: @ Fahrer warten, Fahrer warten . match; Die Lkw @, Lkw @ Fahrer do not: 2/4
#   4-grams: @ Fahrer warten . matches; Die Lkw @ Fahrer, Lkw @ Fahrer warten do not: 1/3
# Corpus: p1 = 12/13, p2 = 8/11, p3 = 5/9, p4 = 3/7; their product is 1440/9009 = 160/1001.
# c = 13, r = 14: BP = exp(1 - 14/13) = exp(-1/13) = 0.92596.
# BLEU = 0.92596 * (160/1001) ** 0.25 = 0.92596 * 0.63230 = 0.58548: 58.55.
DE_BLEU_TOKENIZED = 100 * math.exp(-1 / 13) * (160 / 1001) ** 0.25


def test_tokenized_bleu_splits_compounds_as_the_papers_script_and_is_worked_out_by_hand():
    assert [bleu.tokenize_for_bleu(h) for h in DE_HYPS] == [
        "Der Auto ##AT##-##AT## Fahrer fährt schnell .", "Die Lkw ##AT##-##AT## Fahrer warten ."]
    assert [bleu.tokenize_for_bleu(r) for r in DE_REFS] == [
        "Der Auto ##AT##-##AT## Fahrer fährt sehr schnell .",
        "Die Bus ##AT##-##AT## Fahrer warten ."]
    assert round(DE_BLEU_TOKENIZED, 2) == 58.55
    score, signature = bleu.tokenized_bleu(DE_HYPS, DE_REFS, "de")
    assert score == pytest.approx(DE_BLEU_TOKENIZED, abs=1e-2)
    assert "tok:none" in signature and "compound-split" in signature


# ----------------------------------------------------------------------------------------
# sacreBLEU's figures on punctuation, quotes and compounds

HYPS = ["Die Rich-Text-Datei wurde gestern geöffnet.",
        "Er sagte: „Das ist gut“ – und ging.",
        "Das E-Mail-Konto ist 3-mal gesperrt."]
REFS = ["Die Rich-Text-Datei wurde heute geöffnet.",
        "Er sagte: „Das ist sehr gut“ – und ging.",
        "Das E-Mail-Konto wurde 3-mal gesperrt."]
# The same sentences as the paper-comparable BLEU sees them: Moses-tokenized (the closing
# quote is normalised to '"' and escaped), hyphenated compounds split.
HYPS_TOKENIZED = [
    "Die Rich ##AT##-##AT## Text ##AT##-##AT## Datei wurde gestern geöffnet .",
    "Er sagte : „ Das ist gut &quot; – und ging .",
    "Das E ##AT##-##AT## Mail ##AT##-##AT## Konto ist 3 ##AT##-##AT## mal gesperrt ."]
REFS_TOKENIZED = [
    "Die Rich ##AT##-##AT## Text ##AT##-##AT## Datei wurde heute geöffnet .",
    "Er sagte : „ Das ist sehr gut &quot; – und ging .",
    "Das E ##AT##-##AT## Mail ##AT##-##AT## Konto wurde 3 ##AT##-##AT## mal gesperrt ."]


def test_sacrebleu_figure_is_sacrebleu_on_the_detokenized_text():
    score, signature = bleu.bleu(HYPS, REFS)
    assert score == pytest.approx(sacrebleu.corpus_bleu(HYPS, [REFS]).score, abs=1e-9)
    assert 20 < score < 90
    assert "tok:13a" in signature and "nrefs:1" in signature and "version:" in signature


def test_tokenized_bleu_is_sacrebleu_on_moses_tokens_with_compounds_split():
    assert [bleu.tokenize_for_bleu(h) for h in HYPS] == HYPS_TOKENIZED
    assert [bleu.tokenize_for_bleu(r) for r in REFS] == REFS_TOKENIZED
    score, signature = bleu.tokenized_bleu(HYPS, REFS, "de")
    direct = sacrebleu.corpus_bleu(HYPS_TOKENIZED, [REFS_TOKENIZED], tokenize="none").score
    assert score == pytest.approx(direct, abs=1e-9)
    # Split compounds are extra, easily matched tokens: the tokenized figure runs higher.
    assert score > bleu.bleu(HYPS, REFS)[0]
    assert "tok:none" in signature and "compound-split" in signature


def test_compound_split_is_the_2017_scripts_substitution():
    assert bleu.compound_split("rich-text format") == "rich ##AT##-##AT## text format"
    assert bleu.compound_split("a - b") == "a - b"  # a free-standing dash stays
    # Matches do not overlap (Perl's s///g, and re.sub): the second hyphen of a-b-c stays.
    assert bleu.compound_split("a-b-c") == "a ##AT##-##AT## b-c"
