"""Applying SEARCH/REPLACE edits to in-memory file contents (nothing is ever read from or written to disk)."""

from __future__ import annotations

from swerl_jax.answer import FormatError

# A predicted file may not grow past this many characters. The official release has no limit; the only
# way past it is an edit that multiplies (an empty search inserts the replacement after EVERY newline),
# where the release would try to build a multi-GB string. Far above any real file (real ones: 6-35 KB).
MAX_FILE_CHARS = 32 * 1024 * 1024


def apply_code_change(
    code_context: dict[str, str],
    search_replace_dict: dict[str, list[tuple[str, str]]],
    max_file_chars: int = MAX_FILE_CHARS,
) -> dict[str, str]:
    """New contents of every edited path, applying each path's blocks in order.

    A path not in ``code_context`` starts empty (``../../etc/passwd`` is just a non-matching key). The file
    is ``"\\n" + content``; each block needs ``"\\n" + search`` to occur and replaces all occurrences with
    ``"\\n" + replace``; the leading newline is dropped at the end. Raises FormatError
    (identical_search_replace, search_not_found, file_too_large) naming the path and block index.
    """
    new_content_dict: dict[str, str] = {}
    for path, search_replaces in search_replace_dict.items():
        new_content = "\n" + code_context.get(path, "")
        for index, (search, replace) in enumerate(search_replaces):
            if search == replace:
                raise FormatError(
                    "Search and replace blocks are identical", "identical_search_replace",
                    block_index=index, path=path,
                )
            search = "\n" + search
            replace = "\n" + replace
            if search not in new_content:
                raise FormatError(
                    f"Search block not found in the code: {search}", "search_not_found",
                    block_index=index, path=path,
                )
            growth = len(replace) - len(search)
            # Size the result before building it: count is linear, the replacement may not be. At most
            # len // len(search) occurrences fit, so a small enough bound needs no count.
            if growth > 0 and len(new_content) + len(new_content) // len(search) * growth > max_file_chars:
                grown = len(new_content) + new_content.count(search) * growth
                if grown > max_file_chars:
                    raise FormatError(
                        f"Edited file would have {grown} characters (limit {max_file_chars})",
                        "file_too_large", block_index=index, path=path,
                    )
            new_content = new_content.replace(search, replace)
        new_content_dict[path] = new_content[1:]
    return new_content_dict
