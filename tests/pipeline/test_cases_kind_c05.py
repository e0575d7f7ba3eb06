"""Case C05's kind (``shared/cases``): a user's hard rule survives many short turns, in
whatever language it is written and wherever it sits.

The offline scorer knew constraint cues in English and Chinese only. A rule in German,
French, Spanish, Portuguese, Italian, Russian, Japanese, Korean, Arabic or Hindi after a
greeting scored 4 like every short question after it, and at the case's 400-token budget it
was the one summarised, its 50,000 and VENDOR-K lost with it. Now it scores 5 and stays
verbatim, as the English rule of the case does.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from invariants import assert_invariants

from relevance_memory import RelevanceMemoryManager
from relevance_memory._text import has_constraint

RULES = {
    "en": "Hard rules: total budget must stay under 50,000 CNY, and we may only buy from vendor VENDOR-K.",
    "en_parts": [{"type": "text", "text": "Hard rules: total budget must stay under 50,000 CNY, and we may only buy "
                                          "from vendor VENDOR-K."}],
    "zh_hant": "硬性規定：總預算不得超過 50,000 元，只能向 VENDOR-K 採購。",
    "de": "Wichtig: Das Gesamtbudget darf 50.000 EUR nicht überschreiten, und wir kaufen ausschließlich bei VENDOR-K.",
    "fr": "Règle absolue : le budget total ne doit pas dépasser 50 000 EUR et nous achetons uniquement chez VENDOR-K.",
    "es": "Regla: el presupuesto total no puede superar 50.000 EUR y solo podemos comprar al proveedor VENDOR-K.",
    "pt": "Regras: o orçamento total não pode passar de 50.000 BRL e só podemos comprar do fornecedor VENDOR-K.",
    "it": "Regole: il budget totale non deve superare 50.000 EUR e possiamo acquistare solo dal fornitore VENDOR-K.",
    "ru": "Жёсткие правила: общий бюджет не должен превышать 50 000 рублей, покупать можно только у VENDOR-K.",
    "ja": "必ず守ってください：総予算は50,000円以内、発注先はVENDOR-Kのみです。",
    "ko": "반드시 지켜주세요: 총 예산은 50,000원을 넘으면 안 되고, VENDOR-K에서만 구매해야 합니다.",
    "ar": "قواعد صارمة: يجب ألا تتجاوز الميزانية الإجمالية 50,000 درهم، ويمكننا الشراء فقط من المورد VENDOR-K.",
    "hi": "सख्त नियम: कुल बजट 50,000 रुपये से अधिक नहीं होना चाहिए, और हम केवल VENDOR-K से खरीद सकते हैं।",
}
NUMBER = {"de": "50.000", "es": "50.000", "pt": "50.000", "it": "50.000", "fr": "50 000", "ru": "50 000"}


def _history(rule: Any, *, after_greeting: bool) -> list[dict[str, Any]]:
    history: list[dict[str, Any]] = [{"role": "system", "content": "You help with purchasing."}]
    if after_greeting:
        history += [{"role": "user", "content": "Hello!"}, {"role": "assistant", "content": "Hi, how can I help?"}]
    history.append({"role": "user", "content": rule})
    for n in range(1, 14):
        history.append({"role": "user", "content": f"What is the lead time of option {n}?"})
        history.append({"role": "assistant", "content": f"Option {n} ships in {n + 2} days."})
    history.append({"role": "user", "content": "Which option should we pick?"})
    return history


@pytest.mark.parametrize("after_greeting", [False, True], ids=["first", "after_greeting"])
@pytest.mark.parametrize("lang", list(RULES))
def test_rule_in_any_language_is_scored_5_and_kept(lang: str, after_greeting: bool) -> None:
    """C05's must lines at its settings (keep_recent_steps 4, 400 tokens): the rule is in the
    context verbatim with its number and vendor, scored 5 by the offline scorer."""
    history = _history(RULES[lang], after_greeting=after_greeting)
    index = 3 if after_greeting else 1
    memory = RelevanceMemoryManager(max_input_tokens=400, keep_recent=4)
    memory.extend(history)
    built = memory.build_context()
    assert_invariants(history, built, 400, memory.tokenizer)
    assert len(built.messages) < len(history)  # the cut is real
    decision = built.record.decision_for(f"m{index}")
    assert (decision.score, decision.decision, decision.fidelity) == (5, "kept", "verbatim")
    assert history[index] in built.messages
    text = json.dumps(built.messages, ensure_ascii=False)
    assert NUMBER.get(lang, "50,000") in text and "VENDOR-K" in text


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Das Budget darf 50.000 EUR nicht überschreiten.", True),
        ("Nous achetons uniquement chez VENDOR-K.", True),
        ("Nunca uses el proveedor VENDOR-Z.", True),
        ("Бюджет не должен превышать 50 000 рублей.", True),
        ("予算は必ず50,000円以内にしてください。", True),
        ("절대 VENDOR-Z에서 사지 마세요.", True),
        ("يجب ألا تتجاوز الميزانية 50,000 درهم.", True),
        ("बजट 50,000 से अधिक नहीं होना चाहिए।", True),
        # questions and plain statements are not rules
        ("¿Debe el presupuesto ser menor de 50.000?", False),
        ("هل يجب أن نشتري من VENDOR-K؟", False),
        ("Das Wetter ist heute schön.", False),
        ("मुझे चाय चाहिए।", False),
        ("Option 3 ships in 5 days.", False),
    ],
)
def test_constraint_cues_across_languages(text: str, expected: bool) -> None:
    assert has_constraint(text) is expected


@pytest.mark.parametrize("budget", [300, 800])
@pytest.mark.parametrize("lang", ["de", "ja", "ru"])
def test_rule_after_a_greeting_survives_sixty_appended_turns(lang: str, budget: int) -> None:
    """The rule stays verbatim through 59 turns built one at a time (appends and compactions)."""
    history = _history(RULES[lang], after_greeting=True)[:4]
    memory = RelevanceMemoryManager(max_input_tokens=budget, keep_recent=2)
    memory.extend(history)
    for n in range(1, 60):
        memory.add({"role": "user", "content": f"What is the lead time of option {n}? Also compare price tier {n % 7}."})
        memory.add({"role": "assistant", "content": f"Option {n} ships in {n + 2} days; tier {n % 7} costs {1000 + n * 37} CNY."})
        built = memory.build_context()
        assert history[3] in built.messages, n
