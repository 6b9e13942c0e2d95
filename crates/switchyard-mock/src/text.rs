//! What a text answer says, and in which pieces a stream sends it: `mock answer from {model}`
//! split evenly, or with `words=N` the words `w1 w2 … wN` one per piece, the same for every
//! model. After a prefill (a request whose last message is the assistant's), only what follows
//! it: a model continuing the answer it was given the start of.

use std::fmt::Write as _;

use crate::reply::ANSWER_PREFIX;
use crate::wire::split_even;

/// The pieces of a text answer, in order; their concatenation is the answer's text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Said {
    pieces: Vec<String>,
}

impl Said {
    /// What a text step answers `model`: its script in `chunks` pieces, or with `words` one
    /// word per piece (`w1`, ` w2`, … as a tokenizer splits them, the space before the word),
    /// continued after `prefill` when the request ends with one.
    ///
    /// A prefill is compared with its trailing whitespace ignored (Anthropic refuses a prefill
    /// that ends in whitespace, so callers trim it). When the script does not begin with it,
    /// the whole script is the answer: a model that ignored the prefill.
    pub(crate) fn new(model: &str, words: Option<u32>, chunks: u32, prefill: Option<&str>) -> Said {
        let pieces = match words {
            Some(words) => (1..=words).map(word).collect(),
            None => {
                let text = format!("{ANSWER_PREFIX}{model}");
                split_even(&text, chunks).into_iter().map(str::to_owned).collect()
            }
        };
        let said = Said { pieces };
        match prefill {
            Some(prefill) => said.after(prefill.trim_end()),
            None => said,
        }
    }

    /// The pieces, in order.
    pub(crate) fn pieces(&self) -> &[String] {
        &self.pieces
    }

    /// The pieces as the completion token count.
    pub(crate) fn tokens(&self) -> u32 {
        u32::try_from(self.pieces.len()).unwrap_or(u32::MAX)
    }

    /// The whole text.
    pub(crate) fn text(&self) -> String {
        self.pieces.concat()
    }

    /// What follows `prefix`, in the pieces it falls in (the piece the prefix ends inside cut
    /// to its rest), or the whole when the text does not begin with `prefix`.
    fn after(self, prefix: &str) -> Said {
        if !self.text().starts_with(prefix) {
            return self;
        }
        let mut skip = prefix.len();
        let mut pieces = Vec::with_capacity(self.pieces.len());
        for piece in self.pieces {
            if skip >= piece.len() {
                skip -= piece.len();
            } else {
                // `skip` is a char boundary: the prefix is a prefix of the text.
                pieces.push(piece[skip..].to_owned());
                skip = 0;
            }
        }
        Said { pieces }
    }
}

/// The `n`th word of a `words=N` answer, with the space before it but for the first.
fn word(n: u32) -> String {
    let mut word = String::with_capacity(8);
    if n > 1 {
        word.push(' ');
    }
    let _ = write!(word, "w{n}");
    word
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_answer_names_the_model_in_even_pieces() {
        let said = Said::new("gpt-x", None, 4, None);
        assert_eq!(said.text(), "mock answer from gpt-x");
        assert_eq!(said.pieces().len(), 4);
        assert_eq!(said.tokens(), 4);
    }

    #[test]
    fn words_are_the_same_for_every_model_one_per_piece() {
        let said = Said::new("gpt-x", Some(5), 4, None);
        assert_eq!(said.pieces(), ["w1", " w2", " w3", " w4", " w5"]);
        assert_eq!(said.text(), Said::new("claude-y", Some(5), 9, None).text());
    }

    #[test]
    fn a_prefill_is_continued_with_what_follows_it() {
        let said = Said::new("m", Some(5), 4, Some("w1 w2"));
        assert_eq!(said.pieces(), [" w3", " w4", " w5"]);
        assert_eq!(said.tokens(), 3);
    }

    #[test]
    fn a_prefill_is_compared_without_its_trailing_whitespace() {
        let said = Said::new("m", Some(4), 4, Some("w1 w2 \n"));
        assert_eq!(said.text(), " w3 w4");
    }

    #[test]
    fn a_prefill_ending_inside_a_piece_leaves_the_rest_of_it() {
        let said = Said::new("gpt-x", None, 2, Some("mock ans"));
        assert_eq!(said.text(), "wer from gpt-x");
        assert_eq!(said.pieces(), ["wer", " from gpt-x"]);
    }

    #[test]
    fn a_prefill_the_script_does_not_begin_with_gets_the_whole_script() {
        let said = Said::new("m", Some(3), 4, Some("something else"));
        assert_eq!(said.text(), "w1 w2 w3");
    }

    #[test]
    fn a_prefill_of_the_whole_answer_leaves_nothing_to_say() {
        let said = Said::new("m", Some(2), 4, Some("w1 w2"));
        assert!(said.pieces().is_empty());
    }
}
