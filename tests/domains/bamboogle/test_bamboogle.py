"""Bamboogle as a benchmark and a GenEnv domain: the answer scores (SQuAD normalisation, the data's
quirks), the download's reader, BM25 retrieval over the fixture corpus and the Search-R1 server
client, the episode's mechanics, the simulator's support check, the evaluation's numbers, and one tiny
loop run on the fixture download (slow). The real 125 questions are checked when ../shared has them."""

import collections
import gzip
import http.server
import json
import re
import shutil
import socket
import string
import threading

import pytest

from genenv_jax.domains.bamboogle import data, generation
from genenv_jax.domains.bamboogle.__main__ import main as scores_main
from genenv_jax.domains.bamboogle.bm25_index import BM25Retriever
from genenv_jax.domains.bamboogle.episode import (INVALID_ACTION, NO_MORE_SEARCHES, NO_RESULTS, BamboogleEnvironment,
                                                  final_answer, parse_action, score_responses)
from genenv_jax.domains.bamboogle.metrics import (AnswerScores, cover_match, exact_match, mean_scores,
                                                  normalize_answer, token_f1)
from genenv_jax.domains.bamboogle.passages import CorpusError, Passage, format_passages, iter_corpus, passage_of_line
from genenv_jax.domains.bamboogle.retrieval import HTTPRetriever, RetrievalError, RetrieverMissing, parse_reply
from tests.support import REPO, TESTS

FIXTURES = TESTS / "fixtures" / "bamboogle"
CORPUS = FIXTURES / "wiki-18.jsonl"
SHARED = REPO.parent / "shared" / "benchmarks" / "bamboogle"
needs_shared = pytest.mark.shared_data(SHARED / "test.jsonl", reason=f"real Bamboogle data not at {SHARED}")


# ---------------------------------------------------------------- scores: SQuAD normalisation, EM, cover EM, F1
def _squad_normalize(s):
    """SQuAD v1.1's evaluation script, re-typed as the independent reference."""
    s = s.lower()
    s = "".join(ch for ch in s if ch not in set(string.punctuation))
    s = re.sub(r"\b(a|an|the)\b", " ", s)
    return " ".join(s.split())


def _squad_f1(prediction, gold):
    p, g = _squad_normalize(prediction).split(), _squad_normalize(gold).split()
    common = sum((collections.Counter(p) & collections.Counter(g)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(p), common / len(g)
    return 2 * precision * recall / (precision + recall)


def test_normalisation_cases_are_squads():
    cases = {
        "The  James Madison.": "james madison",
        "James Madison\n": "james madison",            # the sheet's trailing newline
        "james madison": "james madison",              # FlashRAG's lower-cased gold
        "An apple, a day": "apple day",
        "Theater of the Absurd": "theater of absurd",   # articles only as whole words
        "U.S.A.": "usa",
        "June 20, 1837": "june 20 1837",
        "Titan IIIE": "titan iiie",
        "S&P 500": "sp 500",
        "Raúl Castro – Cuba’s": "raúl castro – cuba’s",  # non-ASCII punctuation is not string.punctuation
        "": "",
    }
    for text, expected in cases.items():
        assert normalize_answer(text) == expected == _squad_normalize(text), text


def test_exact_match_cover_match_and_f1_against_any_gold():
    golds = ["20 June 1837", "June 20, 1837"]
    assert exact_match("June 20 1837", golds) == 1.0          # any gold; punctuation ignored
    assert exact_match("20 June, 1837.", golds) == 1.0
    assert exact_match("1837", golds) == 0.0
    assert exact_match("James Madison", ["james madison"]) == 1.0
    assert exact_match("Madison", ["James Madison"]) == 0.0
    # cover EM: a normalised gold inside the normalised prediction (Search-R1's subem), a plain substring
    assert cover_match("He was James Madison, the fourth president", ["James Madison"]) == 1.0
    assert cover_match("Madison", ["James Madison"]) == 0.0
    assert cover_match("19999", ["1999"]) == 1.0               # not on word boundaries, as upstream
    assert cover_match("anything", [""]) == 0.0                # an empty gold never covers
    # F1: SQuAD's token F1, the best over the golds
    assert token_f1("James Madison Jr.", ["James Madison"]) == pytest.approx(0.8)
    assert token_f1("June 1837", golds) == pytest.approx(0.8)
    assert token_f1("the", ["James Madison"]) == 0.0
    assert AnswerScores.of(None, golds) == AnswerScores(0.0, 0.0, 0.0)
    assert AnswerScores.of("20 June 1837", golds) == AnswerScores(1.0, 1.0, 1.0)


def test_f1_agrees_with_squads_script():
    pairs = [("the quick brown fox", "a quick fox"), ("Alexander the Great", "Alexander III of Macedon"),
             ("1999 1999 S&P", "S&P 500 in 1999"), ("Voyager 2 on a Titan IIIE", "Titan IIIE"), ("x", "y")]
    for prediction, gold in pairs:
        assert token_f1(prediction, [gold]) == pytest.approx(_squad_f1(prediction, gold)), (prediction, gold)


def test_data_quirks_in_scores():
    """The known quirks (docs/bamboogle.md): a gold with a trailing newline and a lower-cased gold
    still match; a misspelt gold cannot be matched by the right spelling (EM and cover EM 0, partial F1);
    an answer that changed after the 2018 corpus is only scored against the sheet's gold."""
    assert exact_match("James Madison", ["James Madison\n"]) == 1.0
    misspelt = AnswerScores.of("Jane Shirley Smith", ["Jane Shirly Smith"])
    assert (misspelt.em, misspelt.cover_em) == (0.0, 0.0) and misspelt.f1 == pytest.approx(2 / 3)
    assert exact_match("1999", ["2001"]) == 0.0
    assert mean_scores([misspelt, AnswerScores(1.0, 1.0, 1.0)]) == {"em": 0.5, "cover_em": 0.5,
                                                                    "f1": pytest.approx((2 / 3 + 1) / 2)}
    assert mean_scores([]) == {}


# ---------------------------------------------------------------- the download: FlashRAG's test.jsonl, the sheet, hops
def test_fixture_download_reads_flashrag_rows_with_hops():
    questions = data.read_questions(FIXTURES)
    assert [q.qid for q in questions] == [f"test_{i}" for i in range(6)]
    assert questions[0].answers == ("james madison",)
    assert questions[3].answers == ("20 June 1837", "June 20, 1837")
    assert all(q.hops and len(q.hops) == 2 for q in questions)
    assert questions[0].hops[0] == {"question": "In what year was Citibank founded?", "answer": "1812"}
    assert data.Question.from_json(questions[3].to_json()) == questions[3]


def test_the_original_sheet_as_csv_strips_the_trailing_newline(tmp_path):
    questions = data.read_questions(FIXTURES / "sheet")
    assert [q.qid for q in questions] == ["test_0", "test_1", "test_2"]
    assert questions[0].answers == ("James Madison",) and questions[0].hops is None
    (tmp_path / "test.jsonl").write_text(json.dumps({"Question": " Q? ", "Answer": "A\n"}) + "\n")
    assert data.read_questions(tmp_path)[0] == data.Question("test_0", "Q?", ("A",))


def test_bad_downloads_fail_with_one_line_errors_naming_the_command(tmp_path):
    for where in (tmp_path / "absent", tmp_path):
        with pytest.raises(data.DataMissing, match="python -m genenv_jax.data.download bamboogle") as e:
            data.read_questions(where)
        assert "\n" not in str(e.value)
    (tmp_path / "test.jsonl").write_text('{"id": "a", "question": "q", "golden_answers": ["x"]}\nnot json\n')
    with pytest.raises(data.DataMissing, match=r"test.jsonl:2: not a JSON line"):
        data.read_questions(tmp_path)
    (tmp_path / "test.jsonl").write_text('{"id": "a", "question": "q", "golden_answers": [" "]}\n')
    with pytest.raises(data.DataMissing, match=r"test.jsonl:1 key 'golden_answers': no gold answer"):
        data.read_questions(tmp_path)
    (tmp_path / "test.jsonl").write_text('{"id": "a", "question": "q", "golden_answers": ["x"]}\n' * 2)
    with pytest.raises(data.DataMissing, match="duplicate id 'a'"):
        data.read_questions(tmp_path)
    (tmp_path / "test.jsonl").write_text('{"id": "a", "question": "q", "golden_answers": ["x"]}\n')
    (tmp_path / "hops.jsonl").write_text('{"id": "a", "hops": [{"question": "q"}]}\n')
    with pytest.raises(data.DataMissing, match=r"hops.jsonl:1: expected"):
        data.read_questions(tmp_path)


def test_split_is_a_stable_hash_of_the_id_and_all_test_takes_everything():
    ids = [f"test_{i}" for i in range(125)]
    splits = [data.split_of_id(i) for i in ids]
    assert splits == [data.split_of_id(i) for i in ids]
    assert collections.Counter(splits) == {"train": 68, "validation": 35, "test": 22}
    assert {data.split_of_id(i, "all_test") for i in ids} == {"test"}
    with pytest.raises(ValueError, match="split_mode"):
        data.split_of_id("test_0", "random")


@needs_shared
def test_real_download_has_125_questions_with_stripped_answers():
    questions = data.read_questions(SHARED)
    assert len(questions) == 125 and len({q.qid for q in questions}) == 125
    assert all(a == a.strip() and a for q in questions for a in q.answers)


# ---------------------------------------------------------------- passages and BM25 over the fixture corpus
def test_passages_render_as_search_r1_shows_them():
    p = passage_of_line('{"id": "7", "contents": "\\"New York City\\"\\nNew York City is big.\\nSecond line."}', "f:1")
    assert (p.doc_id, p.title, p.text) == ("7", '"New York City"', "New York City is big.\nSecond line.")
    shown = format_passages([p, Passage("8", '"T"\nbody')])
    assert shown == 'Doc 1(Title: "New York City") New York City is big.\nSecond line.\nDoc 2(Title: "T") body\n'
    with pytest.raises(CorpusError, match="f:3: expected an object with 'id'"):
        passage_of_line('{"contents": "x"}', "f:3")
    assert len(list(iter_corpus(CORPUS))) == 60


@pytest.fixture(scope="module")
def bm25(tmp_path_factory):
    return BM25Retriever(CORPUS, tmp_path_factory.mktemp("bm25"))


def test_bm25_returns_the_supporting_passages_of_both_hops(bm25):
    """Fixture question test_0: hop 1 finds Citibank's founding year, hop 2 the president in 1812."""
    first, second = bm25.search(["In what year was Citibank founded?", "Who was president of the United States in 1812?"], 3)
    assert first[0].doc_id == "0" and "founded in 1812" in first[0].contents
    assert second[0].doc_id == "2" and "James Madison" in second[0].contents
    assert first[0].score > first[1].score > 0
    for q in data.read_questions(FIXTURES):  # every fixture question: each hop's answer in its top 3
        found = bm25.search([h["question"] for h in q.hops], 3)
        for hop, passages in zip(q.hops, found):
            assert any(normalize_answer(hop["answer"]) in normalize_answer(p.contents) for p in passages), (q.qid, hop)
    assert bm25.search(["zzzz qqqq the"], 3) == [[]]  # no corpus term: no passage (not 3 at score 0)
    assert bm25.search([], 3) == []


def test_bm25_index_is_built_once_per_corpus_version_and_reads_gzip(tmp_path, bm25):
    cache = tmp_path / "cache"
    corpus = tmp_path / "wiki-18.jsonl"
    shutil.copy(CORPUS, corpus)
    first = BM25Retriever(corpus, cache)
    assert first.built_now and not BM25Retriever(corpus, cache).built_now
    assert not list((cache / "bm25").glob(".tmp.*"))  # built in a temporary directory, renamed into place
    with corpus.open("a") as f:
        f.write('{"id": "60", "contents": "\\"Citibank Tower\\"\\nA building."}\n')
    changed = BM25Retriever(corpus, cache)
    assert changed.built_now and changed.index_dir != first.index_dir and changed.size == 61
    packed = tmp_path / "wiki-18.jsonl.gz"
    with gzip.open(packed, "wb") as f:
        f.write(CORPUS.read_bytes())
    query = ["What rocket was Voyager 2 launched on?"]
    assert [p.to_json() for p in BM25Retriever(packed, cache).search(query, 3)[0]] == \
           [p.to_json() for p in bm25.search(query, 3)[0]]
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "0", "contents": "\\"A\\"\\nB"}\n{"id": 1}\n')
    with pytest.raises(CorpusError, match=r"bad.jsonl:2: expected"):
        BM25Retriever(bad, cache)


# ---------------------------------------------------------------- the Search-R1 /retrieve client against a local server
class _Server:
    """A local Search-R1-compatible /retrieve server answering from the fixture BM25 (or a canned reply)."""

    def __init__(self, retriever, reply=None, status=200):
        self.requests = []
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.requests.append((self.path, body))
                if reply is not None:
                    answer = reply
                else:
                    rows = retriever.search(body["queries"], body["topk"])
                    answer = {"result": [[{"document": p.to_json(), "score": p.score} if body.get("return_scores")
                                          else p.to_json() for p in row] for row in rows]}
                payload = json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/retrieve"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


def test_http_client_speaks_the_retrieve_contract(bm25):
    server = _Server(bm25)
    try:
        queries = ["In what year was Citibank founded?", "Who founded Alexandria?"]
        got = HTTPRetriever(server.url, timeout_s=5).search(queries, 3)
        assert server.requests == [("/retrieve", {"queries": queries, "topk": 3, "return_scores": True})]
        assert [[(p.doc_id, p.contents, p.score) for p in row] for row in got] == \
               [[(p.doc_id, p.contents, p.score) for p in row] for row in bm25.search(queries, 3)]
    finally:
        server.close()
    # without scores each item is the document itself
    rows = parse_reply({"result": [[{"id": "1", "contents": '"T"\ntext'}]]}, 1, "s")
    assert rows == [[Passage("1", '"T"\ntext', None)]]
    for bad in ({"results": []}, {"result": [[], []]}, {"result": ["x"]}, {"result": [[{"document": {"id": "1"}}]]},
                {"result": [[{"document": {"contents": "x"}, "score": "high"}]]}):
        with pytest.raises(RetrievalError, match="retrieval server s:"):
            parse_reply(bad, 1, "s")


def test_http_client_errors_are_one_line():
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(RetrievalError, match=rf"retrieval server http://127.0.0.1:{port}/retrieve: URLError") as e:
        HTTPRetriever(f"http://127.0.0.1:{port}/retrieve", timeout_s=2, attempts=1).search(["q"], 3)
    assert "\n" not in str(e.value)
    server = _Server(None, reply={"detail": "boom"}, status=500)
    try:
        with pytest.raises(RetrievalError, match="HTTP 500"):
            HTTPRetriever(server.url, timeout_s=5).search(["q"], 3)
        assert len(server.requests) == 1  # the server answered: no retry
    finally:
        server.close()


# ---------------------------------------------------------------- the episode
def _task(qid="test_0"):
    from genenv_jax.domains.base import Task

    q = next(q for q in data.read_questions(FIXTURES) if q.qid == qid)
    return Task(domain="bamboogle", task_id=q.qid, category="two_hop", prompt={"question": q.question},
                verifier={"answers": list(q.answers), "hops": list(q.hops)}, metadata={"split": "train"})


def test_episode_searches_reads_passages_and_ends_on_the_answer(bm25):
    env = BamboogleEnvironment(_task(), bm25, topk=3, max_searches=4, max_turns=6)
    first = env.reset().messages
    assert len(first) == 1 and first[0]["role"] == "user" and "<search>" in first[0]["content"]
    assert first[0]["content"].endswith("Question: Who was president of the United States in the year that Citibank was founded?")
    out = env.step("<think>First the year.</think>\n<search> Citibank founded </search> <answer>x</answer>")
    info = out.observation[0]["content"]
    assert not out.done and out.info["action"] == "search"  # the first tag is the action
    assert info.startswith('<information>Doc 1(Title: "Citibank") Citibank, N.A.') and info.endswith("</information>")
    assert info.count("\nDoc ") == 2
    out = env.step("I think it is 1812.")
    assert out.observation[0]["content"] == INVALID_ACTION and out.info["errors"] == {"invalid_action": 1}
    assert env.step("<search>   </search>").info["errors"] == {"empty_query": 1}
    assert env.step("<search>zzzz qqqq</search>").observation[0]["content"] == f"<information>{NO_RESULTS}</information>"
    answer = "<think>1812: Madison.</think><answer> James Madison </answer>"
    out = env.step(answer)
    assert out.done and out.info["ended"] == "answer"
    assert env.step("<answer>again</answer>").info["errors"] == {"step_after_done": 1}
    score = env.score([{"role": "assistant", "content": "<search>x</search>"}, {"role": "user", "content": "..."},
                       {"role": "assistant", "content": answer}])
    assert score.reward == 1.0 and score.details["answer"] == "James Madison"
    assert (score.details["searches"], score.details["invalid_actions"], score.details["ended"]) == (2, 2, "answer")


def test_episode_caps_and_unanswered_scores(bm25):
    env = BamboogleEnvironment(_task(), bm25, topk=3, max_searches=2, max_turns=6)
    env.reset()
    env.step("<search>Citibank</search>")
    assert env.step("<search>Madison</search>").observation[0]["content"].endswith(NO_MORE_SEARCHES)
    out = env.step("<search>more</search>")
    assert out.done and out.info["ended"] == "search_cap"
    assert env.score([{"role": "assistant", "content": "<search>more</search>"}]).details["error_type"] == "no_answer"

    env = BamboogleEnvironment(_task(), bm25, topk=3, max_searches=4, max_turns=2)
    env.reset()
    assert not env.step("no action").done
    out = env.step("<search>Citibank</search>")
    assert out.done and out.info["ended"] == "turn_cap"
    wrong = env.score([{"role": "assistant", "content": "<answer>Thomas Jefferson</answer>"}])
    assert wrong.reward == 0.0 and wrong.details["error_type"] == "wrong_answer"


def test_a_retrieval_outage_is_shown_and_counted_not_raised():
    class Down:
        def search(self, queries, topk):
            raise RetrievalError("retrieval server http://x/retrieve: URLError: refused")

    env = BamboogleEnvironment(_task(), Down())
    env.reset()
    out = env.step("<search>Citibank</search>")
    assert out.info["errors"] == {"retrieval_error": 1} and "Search failed" in out.observation[0]["content"]


def test_actions_and_final_answers_are_parsed_as_text():
    assert parse_action("<think>hm</think><answer>\n 1999 \n</answer>") == ("answer", "1999")
    assert parse_action("<search>a</answer>") is None
    assert final_answer([{"role": "assistant", "content": "<answer>A</answer>"},
                         {"role": "assistant", "content": "<search>B</search>"}]) is None
    assert final_answer([]) is None
    golds = {"a": ["James Madison"], "b": ["1999"]}
    assert score_responses(golds, {"a": "<answer>James Madison</answer>", "b": "<answer>in 1999</answer>"}) == \
           {"em": 0.5, "cover_em": 1.0, "f1": pytest.approx((1 + 2 / 3) / 2), "n": 2.0}
    with pytest.raises(KeyError, match="unknown task ids"):
        score_responses(golds, {"c": ""})


# ---------------------------------------------------------------- the domain: seeds, retriever, simulator
@pytest.fixture
def domain(monkeypatch, tmp_path):
    from genenv_jax.domains import get_domain

    monkeypatch.setenv("GENENV_CACHE", str(tmp_path / "cache"))
    return get_domain("bamboogle", data_dir=str(FIXTURES))


def test_seeds_splits_and_options(domain, tmp_path):
    from genenv_jax.domains.bamboogle import BamboogleDomain

    assert [t.task_id for t in domain.seeds("train")] == ["test_0", "test_3"]
    assert [t.task_id for t in domain.seeds("validation")] == ["test_2"]
    assert [t.task_id for t in domain.seeds("test")] == ["test_1", "test_4", "test_5"]
    assert {t.category for t in domain.seeds("all")} == {"two_hop"}
    every = BamboogleDomain(data_dir=str(FIXTURES), split_mode="all_test", tfds_cache_dir=str(tmp_path / "tfds"))
    assert len(every.seeds("test")) == 6 and every.seeds("train") == []
    with pytest.raises(data.DataMissing, match="data_dir is empty .*download bamboogle"):
        BamboogleDomain().seeds("train")
    questions_only = tmp_path / "download"
    questions_only.mkdir()
    shutil.copy(FIXTURES / "test.jsonl", questions_only)
    with pytest.raises(RetrieverMissing, match="retrieval_url .* --include_corpus"):  # at startup, one line
        BamboogleDomain(data_dir=str(questions_only))
    with pytest.raises(RetrieverMissing, match="corpus '/nowhere.jsonl' is not a file"):
        BamboogleDomain(data_dir=str(FIXTURES), corpus="/nowhere.jsonl")
    no_hops = BamboogleDomain(data_dir=str(questions_only), retrieval_url="http://127.0.0.1:1/retrieve",
                              tfds_cache_dir=str(tmp_path / "tfds"))
    with pytest.raises(ValueError, match="add hops.jsonl to data_dir"):  # warm-start targets need hops
        no_hops.reference_generation(no_hops.seeds("train")[0])
    with pytest.raises(ValueError, match="split_mode"):
        BamboogleDomain(data_dir=str(FIXTURES), split_mode="random")


def test_reference_episode_scores_one_and_single_replies_are_scored(domain):
    task = domain.seeds("train")[0]
    env = domain.environment(task)
    env.reset()
    transcript = []
    for turn in domain.reference_turns(task):
        transcript.append({"role": "assistant", "content": turn})
        outcome = env.step(turn)
    assert outcome.done and env.score(transcript).reward == 1.0
    assert domain.score(task, domain.reference_response(task)) == 1.0
    assert domain.score(task, "<search>Citibank</search>") == 0.0


def _gen(question, hops, answer):
    return generation.fenced({"question": question, "hops": [{"question": q, "answer": a} for q, a in hops],
                              "answer": answer})


def test_simulator_questions_are_accepted_only_when_retrieval_supports_every_hop(domain):
    seed = domain.seeds("train")[0]
    prompt = domain.simulator_prompt(seed, [1.0], "harder").messages
    assert "HARDER" in prompt[1]["content"] and seed.prompt["question"] in prompt[1]["content"]
    accepted = domain.parse_task(domain.reference_generation(seed), seed, "similar")
    assert accepted.parent_id == seed.task_id and accepted.category == "two_hop"
    assert accepted.verifier["support"] == [["10", "32", "31"], ["33", "11", "10"]]  # House of Hanover, William IV
    assert domain.score(accepted, domain.reference_response(accepted)) == 1.0

    tokyo = ("Which country has Tokyo as its capital?", "Japan")
    cases = {
        "no_json": "I cannot write one.",
        "not_an_object": "```json\n[1, 2]\n```",
        "missing_field": '```json\n{"question": "q", "hops": []}\n```',
        "bad_hops": _gen("q?", [tokyo], "Japan"),
        "too_long": _gen("q" * 401, [tokyo, ("Japan?", "x")], "x"),
        "answer_mismatch": _gen("q?", [tokyo, ("Which ocean borders Japan?", "Pacific Ocean")], "Atlantic"),
        "broken_chain": _gen("q?", [tokyo, ("Which ocean is largest?", "Pacific Ocean")], "Pacific Ocean"),
        "answer_in_question": _gen("Is the Pacific Ocean next to the country of Tokyo?",
                                   [tokyo, ("Which ocean borders Japan?", "Pacific Ocean")], "Pacific Ocean"),
        "bridge_in_question": _gen("Which ocean borders Japan?", [tokyo, ("Which ocean borders Japan?", "Pacific Ocean")],
                                   "Pacific Ocean"),
        "same_as_seed": _gen(seed.prompt["question"], [("In what year was Citibank founded?", "1812"),
                                                       ("Who was president in 1812?", "James Madison")], "James Madison"),
        "bridge_not_retrieved": _gen("Where was the designer of the Eiffel Tower born?",
                                     [("Who designed the Eiffel Tower?", "Gustave Eiffel"),
                                      ("Where was Gustave Eiffel born?", "Dijon")], "Dijon"),
        "answer_not_retrieved": _gen("What is the national flower of the country whose capital is Tokyo?",
                                     [tokyo, ("What is the national flower of Japan?", "Chrysanthemum")], "Chrysanthemum"),
    }
    counts = collections.Counter()
    for reason, text in cases.items():
        rejection = domain.parse_task(text, seed)
        assert getattr(rejection, "reason", None) == reason, (reason, rejection)
        counts[rejection.reason] += 1
    assert set(counts) <= set(domain.rejection_reasons) and sum(counts.values()) == len(cases)


def test_a_retriever_outage_rejects_the_generation(domain):
    class Down:
        def search(self, queries, topk):
            raise RetrievalError("retrieval server http://x/retrieve: HTTP 503 Service Unavailable")

    domain.retriever = Down()  # the cached property's slot
    seed = domain.seeds("train")[0]
    rejection = domain.parse_task(domain.reference_generation(seed), seed)
    assert rejection.reason == "retrieval_error" and "HTTP 503" in rejection.detail


# ---------------------------------------------------------------- the evaluation's numbers
def test_evaluation_reports_em_cover_em_and_f1_and_the_scores_cli_rescores_items(domain, tmp_path, capsys):
    """The evaluation CLI's path (genenv_jax.evaluation.evaluate) with a stand-in model that plays each
    task's reference episode (search per hop, then the answer), except one that answers wrongly."""
    from genenv_jax.text import tokenization
    from genenv_jax.evaluation import evaluate, write_report

    tokenizer = tokenization.load_tokenizer()
    tasks = domain.seeds("test")
    wrong = tasks[-1].prompt["question"]

    def generate(prompts, max_new_tokens):
        out = []
        for p in prompts:
            text = tokenizer.decode(p)
            task = next(t for t in tasks if t.prompt["question"] in text)
            turns = domain.reference_turns(task)
            if task.prompt["question"] == wrong:
                turns[-1] = "<answer> Alexander Graham Bell </answer>"
            out.append(tokenizer.encode(turns[text.count("<information>") - 1])[:max_new_tokens])
        return out

    report = evaluate(domain, tasks, generate, tokenizer, max_new_tokens=64, max_turns=4, progress=False)
    # "Alexander Graham Bell" vs "Alexander the Great": one common token of 3 and 2, F1 0.4
    assert report.summary == {"bamboogle": pytest.approx(2 / 3), "bamboogle_cover_em": pytest.approx(2 / 3),
                              "bamboogle_f1": pytest.approx((2 + 0.4) / 3), "bamboogle/two_hop": pytest.approx(2 / 3)}
    items = write_report(report, tmp_path / "eval")["items"]
    capsys.readouterr()  # TFDS's preparation messages
    assert scores_main(["--data_dir", str(FIXTURES), "--items", str(items)]) == 0
    scores = json.loads(capsys.readouterr().out)
    assert scores == {"em": pytest.approx(2 / 3), "cover_em": pytest.approx(2 / 3), "f1": pytest.approx((2 + 0.4) / 3),
                      "n": 3.0}
    assert domain.answer_scores({i["task_id"]: i["response"] for i in map(json.loads, items.read_text().splitlines())}) \
        == scores
    assert scores_main(["--data_dir", str(tmp_path), "--items", str(items)]) == 2
    assert "download bamboogle" in capsys.readouterr().err


# ---------------------------------------------------------------- configs and the loop, end to end (slow)
def test_configs_validate_and_the_tiny_preset_reads_the_fixture():
    from genenv_jax.configs import bamboogle as config_module
    from genenv_jax.configs.run_config import RunConfig

    tiny = config_module.get_config("tiny")
    assert tiny.domain.options.data_dir == str(FIXTURES)
    RunConfig.from_config_dict(tiny)
    big = config_module.get_config("7b")
    assert big.domain.options.data_dir == "" and big.domain.options.topk == 3
    big.agent.allow_random_init = big.simulator.allow_random_init = True  # no 7B checkpoint here
    assert RunConfig.from_config_dict(big).domain.options["max_searches"] == 4


# The tiny preset's loop, end to end from the command line: tests/integration/test_benchmark_loops.py.
