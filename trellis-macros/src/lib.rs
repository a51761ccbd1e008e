//! `#[trellis::kernel]`: turns a kernel declaration into a typed launch wrapper.
//!
//! ```ignore
//! #[trellis::kernel(
//!     name = "scale_rows",
//!     template = "scale_rows.kernel",     // askama file with blocks `header` and `body`
//!     grid = self.grid(),                 // -> trellis::kernel::Grid
//!     inputs(x: act[self.rows, self.cols], scale: f32[self.rows]),
//!     outputs(y: act[self.rows, self.cols]),
//! )]
//! #[derive(Clone, Debug, Hash)]
//! pub struct ScaleRows { pub rows: usize, pub cols: usize, pub act: Elem, pub rows_per_group: u32 }
//! ```
//!
//! (The template reads `scale`, `{{ rows_per_group }}` and the struct's own methods: the
//! whole example, template and methods, is `docs/kernels.md`'s walkthrough and
//! `examples/downstream/`.)
//!
//! Element types are `u32`, `f32`, `f16`, `bf16`, the name of a field whose type
//! converts into `trellis::kernel::Elem` (`act` above; a `DType` or `ScaleDType` does), or
//! a method of no arguments returning one, written with its parentheses (`x_elem()`: an
//! input whose type a variant chooses). Shapes are Rust expressions over `self`, each
//! extent an unsigned integer (`kernel::dim`; a bare literal is a `usize`). Tensor names
//! `backend`, `launch`, `render` and `outs` are the launch methods' own; kernel and
//! tensor names are C identifiers the units may use (no C++ keyword, MSL type or unit name);
//! the struct takes no generic parameters and no field named `dialect` or `spec`.
//! Optional: `validate = expr` (a `Result<()>` checked before every launch),
//! `shared = expr` (threadgroup bytes the body declares; it and `dynamic_shared` are
//! unsigned integers, as the extents are), `dynamic_shared = expr` (of
//! those, the bytes of the one array a CUDA body sizes at launch, `extern __shared__`:
//! past the 48 KB a kernel may declare statically, the backend opts in at load) and
//! `zero_outputs = expr` (a `bool`: the outputs must start zeroed, as for arrival
//! counters; the kernel leaves them as it found them, so a bound output stays valid for
//! the next launch).
//! `crate = "path"` names the `trellis` crate where a dependency renames it (as serde's
//! `#[serde(crate = "...")]`): the generated code names `::trellis` otherwise.
//!
//! A declaration may come out of a `macro_rules!` (kernels that share an input list:
//! `trellis`'s `gate_up_mma` and its parts). Expressions over `self` must then be
//! written in the macro's own body: `self` in tokens the caller passes in belongs to the
//! caller's hygiene and does not name the generated methods' receiver.
//!
//! The struct must implement `Hash` and `Debug` (its fields are the kernel's identity:
//! [`KernelSpec::id`](../trellis/kernel/trait.KernelSpec.html#tymethod.id)); one without
//! them fails to build with that message at its name (`trellis::kernel::KernelIdentity`).
//!
//! Generated: `impl KernelSpec`, two askama renderers (blocks `header` and `body`,
//! with the declaration's fields and `dialect` in scope, so a template naming a field
//! the kernel lacks fails the build), `<Name>Outputs<T>` with one field per output,
//! and `launch` / `launch_into` methods whose arguments are the named inputs (and
//! outputs), checked for dtype and shape before the backend runs. (`launch_request`,
//! the data-free `Launch` for `Backend::precompile`, is `KernelSpec`'s own method.)

use proc_macro::TokenStream;
use proc_macro2::{Span, TokenStream as TokenStream2};
use quote::{format_ident, quote, quote_spanned};
use syn::ext::IdentExt;
use syn::parse::{Parse, ParseStream};
use syn::punctuated::Punctuated;
use syn::spanned::Spanned;
use syn::{bracketed, parenthesized, Expr, Ident, ItemStruct, LitStr, Token};

struct TensorDecl {
    name: Ident,
    elem: Ident,
    /// `elem` is a method (`name()`), not a field or a built-in type.
    elem_call: bool,
    shape: Punctuated<Expr, Token![,]>,
}

impl Parse for TensorDecl {
    fn parse(input: ParseStream) -> syn::Result<Self> {
        // `r#in` names the C parameter `in`: the raw prefix is Rust's alone.
        let name = Ident::unraw(&input.parse()?);
        input.parse::<Token![:]>()?;
        let elem: Ident = input.parse()?;
        let elem_call = input.peek(syn::token::Paren);
        if elem_call {
            let args;
            parenthesized!(args in input);
            if !args.is_empty() {
                return Err(args.error("an element-type method takes no arguments"));
            }
        }
        let content;
        bracketed!(content in input);
        let shape = Punctuated::parse_terminated(&content)?;
        Ok(TensorDecl {
            name,
            elem,
            elem_call,
            shape,
        })
    }
}

#[derive(Default)]
struct KernelArgs {
    name: Option<LitStr>,
    template: Option<LitStr>,
    grid: Option<Expr>,
    validate: Option<Expr>,
    shared: Option<Expr>,
    dynamic_shared: Option<Expr>,
    zero_outputs: Option<Expr>,
    inputs: Vec<TensorDecl>,
    outputs: Vec<TensorDecl>,
    /// `crate = "path"`: where the `trellis` crate is (a renamed dependency).
    krate: Option<syn::Path>,
}

impl Parse for KernelArgs {
    fn parse(input: ParseStream) -> syn::Result<Self> {
        let mut args = KernelArgs::default();
        let mut seen: Vec<String> = Vec::new();
        while !input.is_empty() {
            // `crate` is a keyword: read any identifier.
            let key = Ident::parse_any(input)?;
            // A second value would silently replace the first (a second `inputs(...)`
            // dropping the first list).
            if seen.contains(&key.to_string()) {
                return Err(syn::Error::new(
                    key.span(),
                    format!("kernel argument `{key}` given twice"),
                ));
            }
            seen.push(key.to_string());
            match key.to_string().as_str() {
                "inputs" | "outputs" => {
                    let content;
                    parenthesized!(content in input);
                    let list: Punctuated<TensorDecl, Token![,]> = Punctuated::parse_terminated(&content)?;
                    let list = list.into_iter().collect();
                    if key == "inputs" {
                        args.inputs = list;
                    } else {
                        args.outputs = list;
                    }
                }
                "name" | "template" => {
                    input.parse::<Token![=]>()?;
                    let v: LitStr = input.parse()?;
                    if key == "name" {
                        args.name = Some(v);
                    } else {
                        args.template = Some(v);
                    }
                }
                "crate" => {
                    input.parse::<Token![=]>()?;
                    let v: LitStr = input.parse()?;
                    args.krate = Some(v.parse_with(syn::Path::parse_mod_style).map_err(|_| {
                        syn::Error::new(
                            v.span(),
                            format!("`crate = {:?}` is no path to the trellis crate", v.value()),
                        )
                    })?);
                }
                "grid" | "validate" | "shared" | "dynamic_shared" | "zero_outputs" => {
                    input.parse::<Token![=]>()?;
                    let e: Expr = input.parse()?;
                    match key.to_string().as_str() {
                        "grid" => args.grid = Some(e),
                        "validate" => args.validate = Some(e),
                        "shared" => args.shared = Some(e),
                        "dynamic_shared" => args.dynamic_shared = Some(e),
                        _ => args.zero_outputs = Some(e),
                    }
                }
                other => {
                    return Err(syn::Error::new(
                        key.span(),
                        format!("unknown kernel argument `{other}` (expected name, template, grid, validate, shared, dynamic_shared, zero_outputs, inputs, outputs, crate)"),
                    ))
                }
            }
            if !input.is_empty() {
                input.parse::<Token![,]>()?;
            }
        }
        Ok(args)
    }
}

/// Names no tensor and no kernel may take: each becomes an identifier of the kernel's
/// CPU, CUDA and Metal units, beside C++'s keywords, MSL's address spaces and types,
/// the units' own parameters and the MLX attributes they bind (`codegen::bind_body`).
const C_RESERVED: &[&str] = &[
    "alignas",
    "alignof",
    "and",
    "and_eq",
    "asm",
    "auto",
    "bitand",
    "bitor",
    "bool",
    "break",
    "case",
    "catch",
    "char",
    "char16_t",
    "char32_t",
    "class",
    "compl",
    "const",
    "constexpr",
    "const_cast",
    "continue",
    "decltype",
    "default",
    "delete",
    "do",
    "double",
    "dynamic_cast",
    "else",
    "enum",
    "explicit",
    "export",
    "extern",
    "false",
    "float",
    "for",
    "friend",
    "goto",
    "if",
    "inline",
    "int",
    "long",
    "mutable",
    "namespace",
    "new",
    "noexcept",
    "not",
    "not_eq",
    "nullptr",
    "operator",
    "or",
    "or_eq",
    "private",
    "protected",
    "public",
    "register",
    "reinterpret_cast",
    "return",
    "short",
    "signed",
    "sizeof",
    "static",
    "static_assert",
    "static_cast",
    "struct",
    "switch",
    "template",
    "this",
    "thread_local",
    "throw",
    "true",
    "try",
    "typedef",
    "typeid",
    "typename",
    "union",
    "unsigned",
    "using",
    "virtual",
    "void",
    "volatile",
    "wchar_t",
    "while",
    "xor",
    "xor_eq",
    // MSL
    "device",
    "constant",
    "thread",
    "threadgroup",
    "kernel",
    "vertex",
    "fragment",
    "half",
    "bfloat",
    "bfloat16_t",
    "uint",
    "ushort",
    "uchar",
    "ulong",
    "size_t",
    // the units' own names (`codegen::bind_body`'s locals) and CUDA's built-ins
    "bufs",
    "group_x_",
    "group_y_",
    "thread_in_group_",
    "group_threads_",
    "simdgroup_id_",
    "lane_id_",
    "threadIdx",
    "blockIdx",
    "blockDim",
    "gridDim",
    // MLX's thread attributes (`codegen::metal::THREAD_ATTRIBUTES`, all of them: MLX
    // declares one wherever its name is in the body, so a tensor of that name is declared
    // twice)
    "threadgroup_position_in_grid",
    "thread_position_in_threadgroup",
    "threads_per_threadgroup",
    "thread_index_in_simdgroup",
    "simdgroup_index_in_threadgroup",
    "dispatch_quadgroups_per_threadgroup",
    "dispatch_simdgroups_per_threadgroup",
    "dispatch_threads_per_threadgroup",
    "grid_origin",
    "grid_size",
    "quadgroup_index_in_threadgroup",
    "quadgroups_per_threadgroup",
    "simdgroups_per_threadgroup",
    "thread_execution_width",
    "thread_index_in_quadgroup",
    "thread_index_in_threadgroup",
    "thread_position_in_grid",
    "threadgroups_per_grid",
    "threads_per_grid",
    "threads_per_simdgroup",
];

/// A kernel's or a tensor's name as its units spell it: a C identifier of ASCII letters,
/// digits and `_`, none of [`C_RESERVED`], no `__` prefix (C++ reserves those) and not
/// upper case of two or more characters (the dialect headers' macros: `LANE_ID`,
/// `BARRIER`, ...; the main crate's `every_template_macro_is_upper_case` keeps them so).
fn check_c_name(what: &str, name: &str, span: Span) -> syn::Result<()> {
    let is_ident = name
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if !is_ident {
        return Err(syn::Error::new(
            span,
            format!(
                "{what} `{name}` is no C identifier (ASCII letters, digits and `_`, not \
                 first a digit): the kernel's C++, CUDA and Metal units name it"
            ),
        ));
    }
    if name.starts_with("__") || C_RESERVED.contains(&name) {
        return Err(syn::Error::new(
            span,
            format!("{what} `{name}` is reserved in the kernel's C++, CUDA or Metal units"),
        ));
    }
    if name.len() > 1 && !name.chars().any(|c| c.is_ascii_lowercase()) {
        return Err(syn::Error::new(
            span,
            format!(
                "{what} `{name}` is upper case: the kernel's units keep those names for \
                 their macros (`LANE_ID`, `BARRIER`, ...)"
            ),
        ));
    }
    Ok(())
}

/// The element types a declaration names directly.
const BUILTIN_ELEMS: [&str; 4] = ["u32", "f32", "f16", "bf16"];

fn elem_expr(krate: &syn::Path, elem: &Ident, call: bool) -> TokenStream2 {
    if call {
        return quote!(::core::convert::Into::<#krate::kernel::Elem>::into(self.#elem()));
    }
    match elem.to_string().as_str() {
        "u32" => quote!(#krate::kernel::Elem::U32),
        "f32" => quote!(#krate::kernel::Elem::F32),
        "f16" => quote!(#krate::kernel::Elem::F16),
        "bf16" => quote!(#krate::kernel::Elem::Bf16),
        // Spanned to the field: a field of another type is an error there. `self` keeps
        // the call site's span, as in `kernel_id`; so the converted value is a local of
        // the field's span (an argument that joins the two spans is blamed on the whole
        // attribute).
        _ => {
            let receiver = quote!(self);
            quote_spanned!(elem.span()=> {
                let field = &#receiver.#elem;
                ::core::convert::Into::<#krate::kernel::Elem>::into(*field)
            })
        }
    }
}

/// `e` through `kernel::dim`, spanned to it: an extent or byte count of a type that is
/// no unsigned size (a float, a signed or a string) is an error there, not a cast that
/// truncates or wraps. An unsuffixed integer literal, which alone would be an `i32`, is
/// a `usize`.
fn dim_expr(krate: &syn::Path, e: &Expr) -> TokenStream2 {
    if let Expr::Lit(syn::ExprLit {
        lit: syn::Lit::Int(n),
        ..
    }) = e
    {
        if n.suffix().is_empty() {
            let n = syn::LitInt::new(&format!("{}usize", n.base10_digits()), n.span());
            return quote_spanned!(e.span()=> #krate::kernel::dim(#n));
        }
    }
    quote_spanned!(e.span()=> #krate::kernel::dim(#e))
}

fn specs(krate: &syn::Path, list: &[TensorDecl]) -> TokenStream2 {
    let items = list.iter().map(|t| {
        let name = t.name.to_string();
        let elem = elem_expr(krate, &t.elem, t.elem_call);
        let shape = t.shape.iter().map(|e| dim_expr(krate, e));
        quote!(#krate::kernel::TensorSpec { name: #name, elem: #elem, shape: vec![#(#shape),*] })
    });
    quote!(vec![#(#items),*])
}

/// Declare a kernel; see the crate docs.
#[proc_macro_attribute]
pub fn kernel(attr: TokenStream, item: TokenStream) -> TokenStream {
    let declared = TokenStream2::from(item.clone());
    let expanded = syn::parse::<KernelArgs>(attr)
        .and_then(|args| expand(args, syn::parse::<ItemStruct>(item)?));
    match expanded {
        Ok(ts) => ts.into(),
        // The item stays declared beside the error, so the declaring crate's uses of it
        // do not add errors of their own to the one that matters.
        Err(e) => {
            let error = e.to_compile_error();
            quote!(#error #declared).into()
        }
    }
}

fn expand(args: KernelArgs, item: ItemStruct) -> syn::Result<TokenStream2> {
    let span = Span::call_site();
    let krate = args
        .krate
        .clone()
        .unwrap_or_else(|| syn::parse_quote!(::trellis));
    // Every required argument that is missing, in one error (one at a time would take a
    // compile per fix).
    let (name, template, grid) = match (args.name, args.template, args.grid) {
        (Some(n), Some(t), Some(g)) if !args.outputs.is_empty() => (n, t, g),
        (name, template, grid) => {
            let needs: Vec<&str> = [
                (name.is_none(), "`name = \"...\"`"),
                (template.is_none(), "`template = \"file\"`"),
                (grid.is_none(), "`grid = expr`"),
                (args.outputs.is_empty(), "at least one output"),
            ]
            .into_iter()
            .filter_map(|(missing, what)| missing.then_some(what))
            .collect();
            let list = match needs.split_last() {
                Some((last, rest)) if !rest.is_empty() => format!("{} and {last}", rest.join(", ")),
                _ => needs.concat(),
            };
            return Err(syn::Error::new(span, format!("kernel needs {list}")));
        }
    };
    check_c_name("kernel name", &name.value(), name.span())?;
    for t in args.inputs.iter().chain(&args.outputs) {
        check_c_name("tensor name", &t.name.to_string(), t.name.span())?;
    }
    // The templates' wrappers hold `spec` and `dialect` themselves: a field of either
    // name would be shadowed there, silently.
    if let Some(f) = item
        .fields
        .iter()
        .filter_map(|f| f.ident.as_ref())
        .find(|f| *f == "dialect" || *f == "spec")
    {
        return Err(syn::Error::new(
            f.span(),
            format!(
                "a kernel struct's field cannot be named `{f}`: the templates read \
                 `{f}` as the rendering's own"
            ),
        ));
    }
    // The struct's fields are the specialization, hashed into its id: no generics.
    if !item.generics.params.is_empty() {
        return Err(syn::Error::new_spanned(
            &item.generics,
            "a kernel struct takes no generic parameters (its fields are the kernel's \
             specialization)",
        ));
    }
    // Each tensor is a parameter of the kernel: one name, one tensor, none of the names
    // the launch methods use themselves.
    const RESERVED: [&str; 4] = ["backend", "launch", "render", "outs"];
    if let Some(t) = args
        .inputs
        .iter()
        .chain(&args.outputs)
        .find(|t| RESERVED.contains(&t.name.to_string().as_str()))
    {
        return Err(syn::Error::new(
            t.name.span(),
            format!(
                "tensor name `{}` is reserved by the launch methods ({})",
                t.name,
                RESERVED.join(", ")
            ),
        ));
    }
    let tensors: Vec<&Ident> = args
        .inputs
        .iter()
        .chain(&args.outputs)
        .map(|t| &t.name)
        .collect();
    for (i, t) in tensors.iter().enumerate() {
        if tensors[..i].contains(t) {
            return Err(syn::Error::new(
                t.span(),
                format!("tensor `{t}` declared twice"),
            ));
        }
        // MLX adds a buffer `<input>_shape` (`_strides`, `_ndim`) wherever the body
        // names it: a tensor of that name would be declared twice on Metal.
        if let Some((x, suffix)) = args.inputs.iter().find_map(|x| {
            ["_shape", "_strides", "_ndim"]
                .into_iter()
                .find(|suffix| *t == &format!("{}{suffix}", x.name))
                .map(|suffix| (&x.name, suffix))
        }) {
            return Err(syn::Error::new(
                t.span(),
                format!(
                    "tensor name `{t}` is taken on Metal: MLX names input `{x}`'s \
                     `{suffix}` buffer so"
                ),
            ));
        }
    }
    // An element type that is no built-in, no call and no field of the struct: say what
    // an element type may be (rustc would only say the struct has no such field).
    if let syn::Fields::Named(fields) = &item.fields {
        let has = |e: &Ident| fields.named.iter().any(|f| f.ident.as_ref() == Some(e));
        if let Some(t) = args.inputs.iter().chain(&args.outputs).find(|t| {
            !t.elem_call && !BUILTIN_ELEMS.contains(&t.elem.to_string().as_str()) && !has(&t.elem)
        }) {
            return Err(syn::Error::new(
                t.elem.span(),
                format!(
                    "`{}` (the element type of tensor `{}`) is neither a built-in element \
                     type ({}) nor a field of `{}`; a field whose type converts into \
                     `trellis::kernel::Elem`, or a method written `name()`, also serves",
                    t.elem,
                    t.name,
                    BUILTIN_ELEMS.join(", "),
                    item.ident
                ),
            ));
        }
    }
    let validate = args.validate.map(|v| quote!(#v)).unwrap_or(quote!(Ok(())));
    // Byte counts through `kernel::dim` as the shapes' extents: a signed or float count is
    // an error at its expression, not a cast that wraps or truncates.
    let shared = args
        .shared
        .as_ref()
        .map_or(quote!(0usize), |e| dim_expr(&krate, e));
    let dynamic_shared = args
        .dynamic_shared
        .as_ref()
        .map_or(quote!(0usize), |e| dim_expr(&krate, e));
    let zero_outputs = args
        .zero_outputs
        .map(|v| quote!(#v))
        .unwrap_or(quote!(false));
    let ty = &item.ident;
    let vis = &item.vis;
    let outputs_ty = format_ident!("{}Outputs", ty);
    let header_ty = format_ident!("__{}Header", ty);
    let body_ty = format_ident!("__{}Body", ty);
    let input_specs = specs(&krate, &args.inputs);
    let output_specs = specs(&krate, &args.outputs);
    let in_names: Vec<&Ident> = args.inputs.iter().map(|t| &t.name).collect();
    let out_names: Vec<&Ident> = args.outputs.iter().map(|t| &t.name).collect();
    let n_out = out_names.len();
    // Checked at the struct's name, so a struct without `Hash` or `Debug` is told so
    // there (`KernelIdentity`'s message), not at the attribute.
    let identity = quote_spanned! {ty.span()=>
        const _: fn() = || {
            fn kernel_identity<T: #krate::kernel::KernelIdentity + ?Sized>() {}
            kernel_identity::<#ty>();
        };
    };
    // `self` at the call site, where the method's receiver is: at the name's span it
    // would not name it when the declaration comes from a `macro_rules!` expansion.
    let receiver = quote!(self);
    // The declaring crate's version: `option_env!`, so a build outside Cargo still works.
    let kernel_id = quote_spanned! {ty.span()=>
        #krate::kernel::KernelId::declared(
            #name,
            match ::core::option_env!("CARGO_PKG_VERSION") { Some(v) => v, None => "" },
            #receiver,
        )
    };
    let doc_outputs = format!("Outputs of [`{ty}`], one field per declared output.");
    let out_docs: Vec<String> = out_names
        .iter()
        .map(|n| format!("The declared output `{n}`."))
        .collect();

    Ok(quote! {
        #item

        #identity

        #[derive(#krate::askama::Template)]
        #[template(path = #template, block = "header", escape = "none", askama = #krate::askama)]
        struct #header_ty<'a> { spec: &'a #ty, dialect: #krate::kernel::Dialect }
        impl ::core::ops::Deref for #header_ty<'_> {
            type Target = #ty;
            fn deref(&self) -> &#ty { self.spec }
        }

        #[derive(#krate::askama::Template)]
        #[template(path = #template, block = "body", escape = "none", askama = #krate::askama)]
        struct #body_ty<'a> { spec: &'a #ty, dialect: #krate::kernel::Dialect }
        impl ::core::ops::Deref for #body_ty<'_> {
            type Target = #ty;
            fn deref(&self) -> &#ty { self.spec }
        }

        // SAFETY: the template's author keeps the declaration's promise (`KernelSpec`'s
        // safety section): its body indexes only the tensors declared here.
        unsafe impl #krate::kernel::KernelSpec for #ty {
            const NAME: &'static str = #name;
            fn id(&self) -> #krate::kernel::KernelId { #kernel_id }
            fn inputs(&self) -> Vec<#krate::kernel::TensorSpec> { #input_specs }
            fn outputs(&self) -> Vec<#krate::kernel::TensorSpec> { #output_specs }
            fn grid(&self) -> #krate::kernel::Grid { #grid }
            fn validate(&self) -> #krate::Result<()> { #validate }
            fn shared_bytes(&self) -> usize { #shared }
            fn dynamic_shared_bytes(&self) -> usize { #dynamic_shared }
            fn zero_outputs(&self) -> bool { #zero_outputs }
            fn render(&self, dialect: #krate::kernel::Dialect) -> #krate::Result<#krate::kernel::Rendered> {
                use #krate::askama::Template as _;
                let fail = |e: #krate::askama::Error| #krate::Error::Compile {
                    kernel: #name.to_string(),
                    backend: dialect.to_string(),
                    log: format!("template rendering failed: {e}"),
                };
                Ok(#krate::kernel::Rendered {
                    dialect,
                    header: #header_ty { spec: self, dialect }.render().map_err(fail)?,
                    body: #krate::kernel::bind_body(dialect, #body_ty { spec: self, dialect }.render().map_err(fail)?),
                })
            }
        }

        #[doc = #doc_outputs]
        #[derive(Debug)]
        #vis struct #outputs_ty<T> { #(#[doc = #out_docs] pub #out_names: T),* }

        impl #ty {
            /// Check every argument, then compile (cached per backend) and run, allocating outputs.
            #[allow(clippy::too_many_arguments)]
            pub fn launch<B: #krate::kernel::Backend>(&self, backend: &B, #(#in_names: &B::Tensor),*) -> #krate::Result<#outputs_ty<B::Tensor>> {
                // Validated first: the shapes are computed only for fields in range.
                let launch = #krate::kernel::KernelSpec::launch_request(self)?;
                #krate::kernel::check_args::<B::Tensor>(#name, &launch.inputs, &[#(#in_names),*])?;
                let outs = backend.launch(&launch, &[#(#in_names),*])?;
                // A backend's own `launch` may return another count: an error, not a panic.
                let [#(#out_names),*]: [B::Tensor; #n_out] = outs.try_into().map_err(|outs: ::std::vec::Vec<B::Tensor>| {
                    #krate::Error::backend(
                        #krate::kernel::Backend::name(backend),
                        ::std::format!("returned {} outputs for {}'s {}", outs.len(), #name, #n_out),
                    )
                })?;
                ::core::result::Result::Ok(#outputs_ty { #(#out_names),* })
            }

            /// Like `launch`, writing into preallocated outputs (checked like the inputs).
            #[allow(clippy::too_many_arguments)]
            pub fn launch_into<'t, B: #krate::kernel::Backend>(&self, backend: &B, #(#in_names: &'t B::Tensor,)* #(#out_names: &'t mut B::Tensor),*) -> #krate::Result<()> {
                // Validated first: the shapes are computed only for fields in range.
                let launch = #krate::kernel::KernelSpec::launch_request(self)?;
                #krate::kernel::check_args::<B::Tensor>(#name, &launch.inputs, &[#(#in_names),*])?;
                #krate::kernel::check_args::<B::Tensor>(#name, &launch.outputs, &[#(&*#out_names),*])?;
                backend.launch_into(&launch, &[#(#in_names),*], &mut [#(#out_names),*])
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A key or a tensor given twice is an error at its second mention, not a silent
    /// replacement of the first.
    #[test]
    fn duplicates_are_errors() {
        let twice = syn::parse_str::<KernelArgs>("inputs(x: f32[4]), inputs(y: f32[4])")
            .err()
            .expect("a second inputs list");
        assert_eq!(twice.to_string(), "kernel argument `inputs` given twice");
        let args = syn::parse_str::<KernelArgs>(
            "name = \"k\", template = \"k.kernel\", grid = g(), inputs(x: f32[4]), outputs(x: f32[4])",
        )
        .unwrap();
        let item: ItemStruct = syn::parse_str("struct K { n: usize }").unwrap();
        let e = expand(args, item).expect_err("x twice");
        assert_eq!(e.to_string(), "tensor `x` declared twice");
        // Nor may a tensor take the name of an input's shape, strides or rank buffer.
        let args = syn::parse_str::<KernelArgs>(
            "name = \"k\", template = \"k.kernel\", grid = g(), inputs(x: f32[4]), outputs(x_strides: f32[4])",
        )
        .unwrap();
        let item: ItemStruct = syn::parse_str("struct K { n: usize }").unwrap();
        let e = expand(args, item).expect_err("x_strides");
        assert!(
            e.to_string()
                .starts_with("tensor name `x_strides` is taken on Metal"),
            "{e}"
        );
    }

    /// A declaration without a required argument, or with one the macro does not know, is
    /// a compile error that names it.
    #[test]
    fn missing_and_unknown_arguments_are_named() {
        let full = [
            "name = \"k\"",
            "template = \"k.kernel\"",
            "grid = g()",
            "outputs(y: f32[4])",
        ];
        let wants = [
            "kernel needs `name = \"...\"`",
            "kernel needs `template = \"file\"`",
            "kernel needs `grid = expr`",
            "kernel needs at least one output",
        ];
        for (skip, want) in wants.iter().enumerate() {
            let text: Vec<&str> = (0..full.len())
                .filter(|&i| i != skip)
                .map(|i| full[i])
                .collect();
            let args = syn::parse_str::<KernelArgs>(&text.join(", ")).unwrap();
            let item: ItemStruct = syn::parse_str("struct K { n: usize }").unwrap();
            let e = expand(args, item).expect_err(want);
            assert_eq!(e.to_string(), *want);
        }
        // Several missing: named together.
        let args = syn::parse_str::<KernelArgs>("name = \"k\", inputs(x: f32[4])").unwrap();
        let item: ItemStruct = syn::parse_str("struct K { n: usize }").unwrap();
        let e = expand(args, item).expect_err("three missing");
        assert_eq!(
            e.to_string(),
            "kernel needs `template = \"file\"`, `grid = expr` and at least one output"
        );
        let e = syn::parse_str::<KernelArgs>("name = \"k\", grids = g()")
            .err()
            .expect("an unknown argument");
        assert!(
            e.to_string().starts_with("unknown kernel argument `grids`"),
            "{e}"
        );
        // All four given: the struct, its `KernelSpec` and the typed launch methods.
        let args = syn::parse_str::<KernelArgs>(&full.join(", ")).unwrap();
        let item: ItemStruct = syn::parse_str("struct K { n: usize }").unwrap();
        let ts = squeeze(expand(args, item).unwrap());
        for want in [
            "structK{n:usize}",
            "unsafeimpl::trellis::kernel::KernelSpecforK",
            "pubfnlaunch<B:::trellis::kernel::Backend>(&self,backend:&B,)",
            "pubfnlaunch_into<'t,B:::trellis::kernel::Backend>(&self,backend:&B,y:&'tmutB::Tensor)",
        ] {
            assert!(ts.contains(want), "{want} in {ts}");
        }
    }

    /// Generics, and tensor names the launch methods use themselves, are errors saying so
    /// (they failed deep in the generated code, with fixes that made no sense).
    #[test]
    fn generics_and_reserved_names_are_named() {
        let args = |outputs: &str| {
            syn::parse_str::<KernelArgs>(&format!(
                "name = \"k\", template = \"k.kernel\", grid = g(), {outputs}"
            ))
            .unwrap()
        };
        let generic: ItemStruct = syn::parse_str("struct K<T> { n: T }").unwrap();
        let e = expand(args("outputs(y: f32[4])"), generic).unwrap_err();
        assert!(e.to_string().contains("no generic parameters"), "{e}");
        let item: ItemStruct = syn::parse_str("struct K { n: usize }").unwrap();
        let e = expand(args("outputs(y: f64[4])"), item).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("`f64` (the element type of tensor `y`) is neither"),
            "{e}"
        );
        // A field or a method is an element type, read from `self`; the field's type is
        // rustc's to check.
        let into_elem = "::core::convert::Into::<::trellis::kernel::Elem>::into";
        let item: ItemStruct = syn::parse_str("struct K { act: Elem }").unwrap();
        let ts = squeeze(expand(args("outputs(y: act[4])"), item).unwrap());
        assert!(
            ts.contains(&format!("elem:{{letfield=&self.act;{into_elem}(*field)}}")),
            "{ts}"
        );
        let item: ItemStruct = syn::parse_str("struct K { n: usize }").unwrap();
        let ts = squeeze(expand(args("outputs(y: y_elem()[4])"), item).unwrap());
        assert!(
            ts.contains(&format!("elem:{into_elem}(self.y_elem())")),
            "{ts}"
        );
        for name in ["backend", "launch", "render", "outs"] {
            let item: ItemStruct = syn::parse_str("struct K { n: usize }").unwrap();
            let e = expand(args(&format!("outputs({name}: f32[4])")), item).unwrap_err();
            assert!(
                e.to_string()
                    .starts_with(&format!("tensor name `{name}` is reserved")),
                "{name}: {e}"
            );
        }
    }

    /// Kernel and tensor names become C identifiers of the units: a raw identifier is
    /// its name, and a name that is no C identifier, or one the units or C++ reserve, is
    /// an error naming it (it failed at the first launch, in the compiler's log). A field
    /// the templates would read as their own `dialect` or `spec` is refused too.
    #[test]
    fn names_are_c_identifiers() {
        let expand_with = |name: &str, outputs: &str, fields: &str| {
            let args = syn::parse_str::<KernelArgs>(&format!(
                "name = \"{name}\", template = \"k.kernel\", grid = g(), {outputs}"
            ))
            .unwrap();
            expand(
                args,
                syn::parse_str(&format!("struct K {{ {fields} }}")).unwrap(),
            )
        };
        let ts = squeeze(expand_with("k", "outputs(r#in: f32[4])", "n: usize").unwrap());
        assert!(ts.contains("name:\"in\""), "{ts}");
        // One capital is a name, not a macro (the headers define none that short).
        assert!(expand_with("k", "outputs(Y: f32[4])", "n: usize").is_ok());
        for (name, output, says) in [
            (
                "scale-rows",
                "y",
                "kernel name `scale-rows` is no C identifier",
            ),
            ("", "y", "kernel name `` is no C identifier"),
            ("__k", "y", "kernel name `__k` is reserved"),
            ("k", "bufs", "tensor name `bufs` is reserved"),
            ("k", "r#float", "tensor name `float` is reserved"),
            ("k", "threadgroup", "tensor name `threadgroup` is reserved"),
            ("k", "lane_id_", "tensor name `lane_id_` is reserved"),
            ("k", "blockIdx", "tensor name `blockIdx` is reserved"),
            ("k", "grid_size", "tensor name `grid_size` is reserved"),
            ("k", "LANE_ID", "tensor name `LANE_ID` is upper case"),
            ("K2", "y", "kernel name `K2` is upper case"),
            ("k", "größe", "tensor name `größe` is no C identifier"),
        ] {
            let e = expand_with(name, &format!("outputs({output}: f32[4])"), "n: usize")
                .unwrap_err()
                .to_string();
            assert!(e.starts_with(says), "{name} / {output}: {e}");
        }
        for field in ["dialect", "spec"] {
            let e = expand_with("k", "outputs(y: f32[4])", &format!("{field}: u32"))
                .unwrap_err()
                .to_string();
            assert!(e.contains(&format!("cannot be named `{field}`")), "{e}");
        }
    }

    /// `ts` as text without whitespace (token spacing is `quote`'s, not ours).
    fn squeeze(ts: TokenStream2) -> String {
        ts.to_string().split_whitespace().collect()
    }

    /// Every shape extent and both byte counts go through `kernel::dim` (an extent or a
    /// count that is no unsigned integer is then rustc's error at its expression, not a
    /// cast); counts not given are 0, and `zero_outputs` is false unless given.
    #[test]
    fn extents_and_byte_counts_go_through_dim() {
        let dim = "::trellis::kernel::dim";
        let args = |extra: &str| {
            syn::parse_str::<KernelArgs>(&format!(
                "name = \"k\", template = \"k.kernel\", grid = g(), \
                 inputs(x: f16[self.m, self.n / 2]), outputs(y: f32[self.m]){extra}"
            ))
            .unwrap()
        };
        let item = || syn::parse_str::<ItemStruct>("struct K { m: u32, n: usize }").unwrap();
        let ts = squeeze(
            expand(
                args(", shared = self.n * 4, dynamic_shared = 2 * self.n, zero_outputs = true"),
                item(),
            )
            .unwrap(),
        );
        for want in [
            format!("shape:vec![{dim}(self.m),{dim}(self.n/2)]"),
            format!("shape:vec![{dim}(self.m)]"),
            format!("fnshared_bytes(&self)->usize{{{dim}(self.n*4)}}"),
            format!("fndynamic_shared_bytes(&self)->usize{{{dim}(2*self.n)}}"),
            "fnzero_outputs(&self)->bool{true}".to_string(),
        ] {
            assert!(ts.contains(&want), "{want} in {ts}");
        }
        // A bare literal, alone an `i32` (no `Dim`), is a `usize`; a suffixed one is kept.
        let literal = syn::parse_str::<KernelArgs>(
            "name = \"k\", template = \"k.kernel\", grid = g(), \
             outputs(y: f32[self.m, 2, 3u32]), shared = 4096",
        )
        .unwrap();
        let ts = squeeze(expand(literal, item()).unwrap());
        for want in [
            format!("shape:vec![{dim}(self.m),{dim}(2usize),{dim}(3u32)]"),
            format!("fnshared_bytes(&self)->usize{{{dim}(4096usize)}}"),
        ] {
            assert!(ts.contains(&want), "{want} in {ts}");
        }
        let ts = squeeze(expand(args(""), item()).unwrap());
        for want in [
            "fnshared_bytes(&self)->usize{0usize}",
            "fndynamic_shared_bytes(&self)->usize{0usize}",
            "fnzero_outputs(&self)->bool{false}",
        ] {
            assert!(ts.contains(want), "{want} in {ts}");
        }
    }

    /// `crate = "path"` moves every path of the generated code to it (a dependency
    /// renamed), so no `::trellis` is left; a value that is no path is named.
    #[test]
    fn the_crate_path_is_the_declarations() {
        let args = syn::parse_str::<KernelArgs>(
            "name = \"k\", template = \"k.kernel\", grid = g(), crate = \"::tr::inner\", \
             inputs(x: f16[self.n]), outputs(y: act[self.n]), shared = 64",
        )
        .unwrap();
        let item: ItemStruct = syn::parse_str("struct K { n: usize, act: Elem }").unwrap();
        let ts = squeeze(expand(args, item).unwrap());
        assert!(!ts.contains("::trellis"), "{ts}");
        for want in [
            "unsafeimpl::tr::inner::kernel::KernelSpecforK",
            "#[derive(::tr::inner::askama::Template)]",
            "askama=::tr::inner::askama",
            "::tr::inner::kernel::dim(self.n)",
            "::tr::inner::kernel::KernelId::declared(",
        ] {
            assert!(ts.contains(want), "{want} in {ts}");
        }
        let e = syn::parse_str::<KernelArgs>("crate = \"not a path\"")
            .err()
            .expect("no path");
        assert_eq!(
            e.to_string(),
            "`crate = \"not a path\"` is no path to the trellis crate"
        );
    }
}
