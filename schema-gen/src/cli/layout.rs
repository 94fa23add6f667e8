//! `--layout`: the model's [`Layout`] on the command line, by its own names
//! and one-line summaries (no second enum that repeats it).

use clap::builder::{PossibleValue, PossibleValuesParser, TypedValueParser};

use schema_model::Layout;

/// Parses `--layout` into a [`Layout`]: `single-server` or `citus`
/// ([`Layout::name`]), listed with [`Layout::summary`] in `--help`.
pub(super) fn parser() -> impl TypedValueParser<Value = Layout> {
    PossibleValuesParser::new(
        Layout::ALL.map(|layout| PossibleValue::new(layout.name()).help(layout.summary())),
    )
    .map(|name| Layout::from_name(&name).unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{Arg, Command};

    #[test]
    fn every_layout_parses_by_its_name_and_nothing_else_does() {
        let command =
            || Command::new("t").arg(Arg::new("layout").long("layout").value_parser(parser()));
        for layout in Layout::ALL {
            let matches = command()
                .try_get_matches_from(["t", "--layout", layout.name()])
                .unwrap();
            assert_eq!(matches.get_one::<Layout>("layout"), Some(&layout));
        }
        assert!(
            command()
                .try_get_matches_from(["t", "--layout", "citus-rows"])
                .is_err()
        );
    }
}
