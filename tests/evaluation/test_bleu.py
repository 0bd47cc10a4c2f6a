"""BLEU two ways: sacreBLEU's figures, the tokenized, compound-split BLEU of the 2017
papers, and the compound split itself."""

import pytest
import sacrebleu

from transformer_jax.evaluation import bleu

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
