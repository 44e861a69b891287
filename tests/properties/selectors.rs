//! The label and field selector parser (the simulator's, which herald's configuration check uses):
//! arbitrary text gives a selector or a typed error, never a panic; what parses matches any labels
//! without panicking too.

use herald_sim::selector::{FieldSelector, LabelSelector};
use proptest::prelude::*;
use serde_json::{Map, Value};

use crate::odd_string;

/// Text made of the selector grammar's own pieces, so the parser goes deep, not just fails early.
fn selector_text() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        Just("app".to_owned()),
        Just("example.com/tier".to_owned()),
        Just("metadata.name".to_owned()),
        Just("=".to_owned()),
        Just("==".to_owned()),
        Just("!=".to_owned()),
        Just("!".to_owned()),
        Just(" in ".to_owned()),
        Just(" notin ".to_owned()),
        Just("(".to_owned()),
        Just(")".to_owned()),
        Just(",".to_owned()),
        Just(">".to_owned()),
        Just("<".to_owned()),
        Just("\\".to_owned()),
        Just(" ".to_owned()),
        Just("-1".to_owned()),
        Just("99999999999999999999".to_owned()),
        "[a-z0-9.-]{0,8}",
        odd_string(),
    ];
    proptest::collection::vec(piece, 0..16).prop_map(|pieces| pieces.concat())
}

fn labels() -> impl Strategy<Value = Map<String, Value>> {
    proptest::collection::btree_map("[a-z./]{1,8}", odd_string(), 0..4)
        .prop_map(|m| m.into_iter().map(|(k, v)| (k, Value::String(v))).collect())
}

proptest! {
    #[test]
    fn label_selectors_parse_or_explain(text in selector_text(), labels in labels()) {
        if let Ok(selector) = LabelSelector::parse(&text) {
            let _ = selector.matches(Some(&labels));
            let _ = selector.matches(None);
        }
        let _ = LabelSelector::parse_explained(&text).map_err(|r| r.reason().to_owned());
    }

    #[test]
    fn field_selectors_parse_or_explain(text in selector_text(), value in odd_string()) {
        if let Ok(selector) = FieldSelector::parse(&text) {
            let _ = selector.matches(|_| Some(value.clone()));
            let _ = selector.matches(|_| None);
        }
        let _ = FieldSelector::parse_explained(&text).map_err(|r| r.reason().to_owned());
    }

    #[test]
    fn arbitrary_text_never_panics_the_parsers(text in "(?s).{0,200}") {
        let _ = LabelSelector::parse(&text);
        let _ = FieldSelector::parse(&text);
    }
}
