//! [`tls_config!`](crate::tls_config): the `tls` mapping of a sink that speaks TLS itself.

/// Declares a sink's `tls` settings: the PEM files every sink that speaks TLS itself reads
/// (`caFile`, `clientCertFile`, `clientKeyFile`, documented here once), then the sink's own keys.
///
/// The struct derives serde (`deny_unknown_fields`, camelCase: one struct, so unknown keys are
/// reported with their path and every accepted key) and a schema, and gets the checks and the
/// `${VAR}` expansion every sink applies to those files. Its crate needs `serde` and `schemars`.
///
/// ```
/// herald_sink_core::tls_config! {
///     /// `tls` of an example sink.
///     pub struct ExampleTls {
///         /// Require TLS. Default `false`. Example: `true`.
///         #[serde(default)]
///         pub required: bool,
///     }
/// }
///
/// let tls: ExampleTls = serde_json::from_value(serde_json::json!({
///     "clientCertFile": "/etc/herald/client.pem",
///     "required": true,
/// }))?;
/// let mut problems = herald_sink_core::config::Problems::default();
/// tls.check_client_pair(&mut problems);
/// let keys: Vec<_> = problems.into_iter().map(|p| p.key).collect();
/// assert_eq!(keys, ["tls.clientKeyFile"]);
/// # Ok::<(), serde_json::Error>(())
/// ```
#[macro_export]
macro_rules! tls_config {
    (
        $(#[$meta:meta])*
        pub struct $name:ident {
            $(
                $(#[$field_meta:meta])*
                pub $field:ident: $ty:ty,
            )*
        }
    ) => {
        $(#[$meta])*
        #[derive(
            Debug, Clone, Default, PartialEq, Eq, ::serde::Deserialize, ::schemars::JsonSchema,
        )]
        #[serde(deny_unknown_fields, rename_all = "camelCase")]
        pub struct $name {
            /// CA certificates (PEM) that verify the other end, instead of the system's roots.
            /// Default: the system's roots. Example: `/etc/herald/ca.pem`.
            #[serde(default)]
            pub ca_file: ::std::option::Option<::std::path::PathBuf>,
            /// Client certificate chain (PEM) for mutual TLS; needs `clientKeyFile`. Default: none.
            /// Example: `/etc/herald/client.pem`.
            #[serde(default)]
            pub client_cert_file: ::std::option::Option<::std::path::PathBuf>,
            /// Private key (PEM) of `clientCertFile`. Default: none. Example: `/etc/herald/client-key.pem`.
            #[serde(default)]
            pub client_key_file: ::std::option::Option<::std::path::PathBuf>,
            $(
                $(#[$field_meta])*
                pub $field: $ty,
            )*
        }

        impl $name {
            /// The PEM files with their key path below the sink (`tls.caFile` …), given or not.
            #[must_use]
            pub fn files(
                &self,
            ) -> [(&'static str, ::std::option::Option<&::std::path::PathBuf>); 3] {
                [
                    ("tls.caFile", self.ca_file.as_ref()),
                    ("tls.clientCertFile", self.client_cert_file.as_ref()),
                    ("tls.clientKeyFile", self.client_key_file.as_ref()),
                ]
            }

            /// The PEM files given, for `${VAR}` expansion, with their key path below the sink.
            pub fn paths_mut(
                &mut self,
            ) -> ::std::vec::Vec<(&'static str, &mut ::std::path::PathBuf)> {
                [
                    ("tls.caFile", &mut self.ca_file),
                    ("tls.clientCertFile", &mut self.client_cert_file),
                    ("tls.clientKeyFile", &mut self.client_key_file),
                ]
                .into_iter()
                .filter_map(|(key, path)| path.as_mut().map(|path| (key, path)))
                .collect()
            }

            /// Records a client certificate given without its key, or the reverse.
            pub fn check_client_pair(&self, problems: &mut $crate::config::Problems) {
                match (&self.client_cert_file, &self.client_key_file) {
                    (Some(_), None) => {
                        problems.add("tls.clientKeyFile", "required with clientCertFile");
                    }
                    (None, Some(_)) => {
                        problems.add("tls.clientCertFile", "required with clientKeyFile");
                    }
                    _ => {}
                }
            }
        }
    };
}
