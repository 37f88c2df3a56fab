"""Lookup APIs over the read-only tables: SearchEngine, Wiki, History, QuestionAnswering, ImageCaptioning,
SpeechRecognition; plus GetToday and SendEmail.

SearchEngine ranks SearchEngine.json's pre-tokenized documents with BM25 (Okapi, k1=1.5, b=0.75) and
returns the best two raw documents.
"""

from __future__ import annotations

import math
import re

from genenv_jax.domains.api_bank.apis.base import ApiError, register, require_text

SEARCH_RESULTS = 2
_WORD = re.compile(r"\w+|[^\w\s]")


class BM25:
    """Okapi BM25 over token lists (negative idf floored at 0.25 x the mean idf, as the usual implementation)."""

    def __init__(self, documents, k1=1.5, b=0.75, epsilon=0.25):
        self.documents, self.k1, self.b = documents, k1, b
        self.lengths = [len(d) for d in documents]
        self.mean_length = sum(self.lengths) / max(len(documents), 1)
        self.frequencies = []
        counts: dict[str, int] = {}
        for document in documents:
            frequency: dict[str, int] = {}
            for token in document:
                frequency[token] = frequency.get(token, 0) + 1
            self.frequencies.append(frequency)
            for token in frequency:
                counts[token] = counts.get(token, 0) + 1
        n = len(documents)
        self.idf = {t: math.log(n - c + 0.5) - math.log(c + 0.5) for t, c in counts.items()}
        floor = epsilon * (sum(self.idf.values()) / max(len(self.idf), 1))
        self.idf = {t: (v if v >= 0 else floor) for t, v in self.idf.items()}

    def scores(self, query):
        out = []
        for frequency, length in zip(self.frequencies, self.lengths):
            score = 0.0
            for token in query:
                f = frequency.get(token, 0)
                if f:
                    score += self.idf[token] * f * (self.k1 + 1) / (
                        f + self.k1 * (1 - self.b + self.b * length / self.mean_length))
            out.append(score)
        return out


def tokenize(text: str) -> list[str]:
    return _WORD.findall(text.lower())


def _search_index(state) -> BM25:
    index = state.session.get("_search_index")
    if index is None:
        index = state.session["_search_index"] = BM25(state.table("SearchEngine")["tokenized_documents"])
    return index


@register("SearchEngine", "keyword:str")
def search_engine(state, keyword):
    require_text(keyword, "The keyword cannot be empty.")
    scores = _search_index(state).scores(tokenize(keyword))
    best = sorted(range(len(scores)), key=lambda i: -scores[i])[:SEARCH_RESULTS]
    return [dict(state.table("SearchEngine")["raw_documents"][i]) for i in best]


@register("Wiki", "keyword:str")
def wiki(state, keyword):
    require_text(keyword, "The keyword cannot be empty.")
    table = state.table("Wiki")
    key = next((k for k in table if k.lower() == keyword.strip().lower()), None)
    if key is None:
        raise ApiError(f"No Wikipedia page found for {keyword}.")
    return {"url": table[key]["url"], "summary": table[key]["summary"]}


@register("QueryHistoryToday", "date:str")
def query_history_today(state, date):
    events = state.table("History").get(str(date).strip())
    if events is None:
        raise ApiError("The date is not in the database.")
    return [f"Title: {e['Title']}, Date: {e['Date']}, Description: {e['Description']}" for e in events]


@register("DocumentQA", "url:str question:str")
def document_qa(state, url, question):
    """The stored answer to the exact question about the document at `url`."""
    pairs = state.table("QuestionAnswering").get(url)
    if pairs is None:
        raise ApiError(f"The document {url} could not be downloaded.")
    answer = next((p["answer"] for p in pairs if p["question"].strip().lower() == question.strip().lower()), None)
    return answer if answer is not None else "The question is too difficult to answer."


@register("ImageCaption", "url:str")
def image_caption(state, url):
    captions = state.session.get("_captions")
    if captions is None:
        captions = state.session["_captions"] = {e["url"]: e["caption"] for e in state.table("ImageCaptioning")}
    if url not in captions:
        raise ApiError(f"The image {url} could not be downloaded.")
    return captions[url]


@register("SpeechRecognition", "url:str")
def speech_recognition(state, url):
    transcript = state.table("SpeechRecognition").get(url)
    if transcript is None:
        raise ApiError(f"The audio {url} could not be downloaded.")
    return transcript


@register("GetToday")
def get_today(state):
    return state.today


@register("SendEmail", "receiver:str subject:str content:str")
def send_email(state, receiver, subject, content):
    if "@" not in receiver:
        raise ApiError("The receiver is not an email address.")
    state.session.setdefault("sent_emails", []).append({"receiver": receiver, "subject": subject, "content": content})
    return "success"
