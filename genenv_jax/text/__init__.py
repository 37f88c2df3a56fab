"""Text: the Qwen2.5 tokenizer and chat template (tokenization), tool-call parsing and rendering,
chat prompts and the loop's tokenizer facade (chat_text), tokenizers carried by GGUF files
(gguf_tokenizer), and the small study tokenizer (small_tokenizer)."""

# modules
__all__ = ["chat_text", "gguf_tokenizer", "small_tokenizer", "tokenization"]
