% tea's Prolog support, consulted into every Scryer Prolog machine that runs `language: prolog`
% blocks (tea-yaml/src/prolog.rs). The Edge Agent's contract: `state/2` facts in, `return/2`
% out; a block's clauses are read by Prolog's own reader, facts and rules asserted for the
% block's run, directives and queries called, each under an inference limit.

:- use_module(library(lists)).
:- use_module(library(between)).
:- use_module(library(iso_ext)).
:- use_module(library(charsio)).
:- use_module(library(format)).
:- use_module(library(dcgs)).
:- use_module(library(dif)).
:- use_module(library(pairs)).
:- use_module(library(ordsets)).
:- use_module(library(assoc)).
:- dynamic('$tea_global'/2).

% SWI-Prolog's prefix operators for declarations (`:- dynamic foo/1.`).
:- op(1150, fx, dynamic).
:- op(1150, fx, discontiguous).
:- op(1150, fx, table).

:- dynamic(state/2).
:- dynamic('$tea_return'/2).
:- dynamic('$tea_limits'/1).

% --- Reading, checking and classifying a block -------------------------------------------------

% '$tea_check'(+Clauses, -Result): Clauses is a list of c(Line, Codes), each one clause's text.
% Result is ok, or error(Line, Message) for the first clause that does not read or that calls
% what the sandbox refuses.
'$tea_check'([], ok).
'$tea_check'([c(Line, Codes)|Cs], Result) :-
    (   '$tea_read'(Codes, Term, Error)
    ->  (   Error == none
        ->  (   '$tea_unsafe_clause'(Term, Why)
            ->  Result = error(Line, Why)
            ;   '$tea_check'(Cs, Result)
            )
        ;   '$tea_describe'(Error, Message),
            Result = error(Line, Message)
        )
    ;   Result = error(Line, 'the clause does not read as Prolog')
    ).

'$tea_read'(Codes, Term, Error) :- '$tea_read'(Codes, Term, _, Error).
'$tea_read'(Codes, Term, Vs, Error) :-
    atom_codes(Atom, Codes),
    atom_chars(Atom, Chars),
    catch(( read_term_from_chars(Chars, Term, [variable_names(Vs)]), Error = none ),
          error(syntax_error(What), _),
          Error = syntax(What)).

'$tea_describe'(syntax(What), Message) :- !,
    '$tea_text'(What, W),
    '$tea_concat'('syntax error: ', W, Message).

'$tea_describe'(error(E, Why), Why) :- atom(Why), '$tea_sandbox_error'(E), !.
'$tea_describe'(error(syntax_error(What), _), Message) :- !,
    '$tea_text'(What, W),
    '$tea_concat'('syntax error: ', W, Message).
'$tea_describe'(error(E, _), Message) :- !, '$tea_short_text'(E, Message).
'$tea_describe'(E, Message) :- '$tea_short_text'(E, Message).

% The errors tea's sandbox and limits raise, with their message as context.
'$tea_sandbox_error'(permission_error(_, _, _)).
'$tea_sandbox_error'(existence_error(procedure, _)).
'$tea_sandbox_error'(resource_error(_)).
'$tea_sandbox_error'(representation_error(json_number)).

% A term's text for a message: at most 30 levels deep.
'$tea_short_text'(T, A) :-
    (   atom(T) -> A = T
    ;   write_term_to_chars(T, [quoted(true), max_depth(30)], Cs), atom_chars(A, Cs)
    ).

% atom_concat/3 of Scryer 0.10 fails on some atoms (those of its own errors): this does not.
'$tea_concat'(A, B, C) :-
    write_term_to_chars(A, [], As), write_term_to_chars(B, [], Bs), append(As, Bs, Cs), atom_chars(C, Cs).

'$tea_text'(T, A) :-
    (   atom(T) -> A = T
    ;   write_term_to_chars(T, [quoted(true)], Cs), atom_chars(A, Cs)
    ).

% The kinds of a block's clauses, as The Edge Agent tells them apart.
'$tea_kind'((:- Body), directive(Body)) :- !.
'$tea_kind'((?- Body), query(Body)) :- !.
'$tea_kind'((Head :- Body), rule(Head, Body)) :- !.
'$tea_kind'(Term, fact(Term)) :-
    callable(Term), \+ atom(Term),
    functor(Term, F, N),
    \+ '$tea_action'(F), \+ '$tea_pure'(F, N), \+ '$tea_outside'(F, N), \+ '$tea_defined_goal'(Term), !.
'$tea_kind'(Term, query(Term)).

% A term whose predicate exists already (a built-in or a library's, not a fact a block asserted)
% is called, not asserted.
'$tea_defined_goal'(Term) :-
    catch(predicate_property(Term, _), _, fail),
    \+ catch(predicate_property(Term, dynamic), _, fail).

'$tea_action'(F) :- member(F, [return, state, ':', ',', ';', '->', '*->', '>', '<', '>=', '=<',
    '=:=', '=\\=', '=', '\\=', '==', '\\==', '@<', '@>', '@=<', '@>=', '\\+', is, findall,
    bagof, setof, member, memberchk, append, length, nth0, nth1, msort, sort, reverse, last,
    sumlist, sum_list, max_list, min_list, forall, aggregate_all, aggregate, call, once, succ,
    plus, abs, sign, max, min, write, writeln, print, format, atom, number, integer, float,
    compound, is_list, ground, atom_string, atom_codes, atom_chars, '#=', '#\\=', '#<', '#>',
    '#=<', '#>=', in, ins, label, labeling, all_different, all_distinct, sum, tuples_in]).

% --- The sandbox: an allowlist ------------------------------------------------------------------
% A block calls only what is listed here ('$tea_pure'/2: pure built-ins and library predicates,
% tea's state/2 and return/2, the SWI-Prolog helpers above), the meta-predicates of
% '$tea_meta_spec'/3 (whose goal arguments are checked the same way), assert/retract of its own
% predicates, and the predicates it defines itself. Anything else that exists in the machine
% (files, streams, flags, operators, modules, global variables, the machine's '$…' internals,
% M:G) is refused: at load when the text names it, else when it is called (a goal or closure
% known only at run time is checked then). A name that does not exist at all is the block's own
% (asserted when it runs) or an existence error.

'$tea_unsafe_clause'(Term, Why) :-
    '$tea_kind'(Term, Kind),
    (   Kind = directive(Body) -> '$tea_unsafe_directive'(Body, Why)
    ;   Kind = query(Body) -> '$tea_unsafe_goal'(Body, Why)
    ;   Kind = rule(Head, Body) -> ( '$tea_unsafe_head'(Head, Why) -> true ; '$tea_unsafe_goal'(Body, Why) )
    ;   Kind = fact(Head) -> '$tea_unsafe_head'(Head, Why)
    ).

% A head a block may not define (assert) or retract: another module's, tea's or the machine's
% internals, hooks of the machine, tea's state/2 and return/2 (state/2 may be retracted).
'$tea_unsafe_head'(H, Why) :- '$tea_unsafe_head'(define, H, Why).
'$tea_unsafe_head'(_, H, _) :- var(H), !, fail.
'$tea_unsafe_head'(_, M:H, Why) :- !,
    '$tea_text'(M:H, T),
    '$tea_concat'(T, ': a block defines no other module''s predicates (tea''s sandbox)', Why).
'$tea_unsafe_head'(How, Head, Why) :-
    callable(Head), functor(Head, F, N),
    (   atom_chars(F, ['$'|_]) -> '$tea_refused_head'(F/N, Why)
    ;   memberchk(F/N, [term_expansion/2, goal_expansion/2, portray/1, verify_attributes/3,
                        project_attributes/2, attribute_goals/3]) -> '$tea_refused_head'(F/N, Why)
    ;   How == define, memberchk(F/N, [state/2, return/2]) -> '$tea_refused_define'(F/N, Why)
    ;   \+ '$tea_own'(Head), ( '$tea_known'(Head) ; '$tea_outside'(F, N) ) -> '$tea_refused_head'(F/N, Why)
    ;   How == retract, F/N == return/2 -> '$tea_refused_define'(F/N, Why)
    ).

'$tea_refused_head'(PI, Why) :-
    '$tea_text'(PI, T),
    '$tea_concat'(T, ' is the machine''s, not the block''s own: a block defines, asserts and retracts only its own predicates (tea''s sandbox)', Why).

'$tea_refused_define'(PI, Why) :-
    '$tea_text'(PI, T),
    '$tea_concat'(T, ' is tea''s (state in, updates out); a block may not define it', Why).

'$tea_unsafe_directive'(use_module(library(L)), Why) :- !, \+ '$tea_library'(L), '$tea_refused_library'(L, Why).
'$tea_unsafe_directive'(use_module(library(L), _), Why) :- !, \+ '$tea_library'(L), '$tea_refused_library'(L, Why).
'$tea_unsafe_directive'(ensure_loaded(library(L)), Why) :- !, \+ '$tea_library'(L), '$tea_refused_library'(L, Why).
'$tea_unsafe_directive'(dynamic(S), Why) :- !, '$tea_unsafe_spec'(S, Why).
'$tea_unsafe_directive'(discontiguous(_), _) :- !, fail.
'$tea_unsafe_directive'(table(_), _) :- !, fail.
'$tea_unsafe_directive'(set_prolog_flag(double_quotes, _), _) :- !, fail.
'$tea_unsafe_directive'(Body, Why) :- '$tea_unsafe_goal'(Body, Why).

% The predicate indicators of a dynamic/1 declaration.
'$tea_unsafe_spec'(S, _) :- var(S), !, fail.
'$tea_unsafe_spec'((A, B), Why) :- !, ( '$tea_unsafe_spec'(A, Why) -> true ; '$tea_unsafe_spec'(B, Why) ).
'$tea_unsafe_spec'([S|Ss], Why) :- !, ( '$tea_unsafe_spec'(S, Why) -> true ; '$tea_unsafe_spec'(Ss, Why) ).
'$tea_unsafe_spec'(F/N, Why) :- atom(F), integer(N), N >= 0, N =< 255, !, functor(H, F, N), '$tea_unsafe_head'(H, Why).
'$tea_unsafe_spec'(_, _) :- fail.

% The libraries a block may name (all loaded already, so naming them loads nothing; SWI-Prolog's
% names too).
'$tea_library'(L) :- memberchk(L, [lists, clpfd, clpz, apply, aggregate, between, dif, pairs,
    charsio, format, error, strings, apply_macros, solution_sequences, assoc, ordsets]).

'$tea_refused_library'(L, Why) :-
    '$tea_text'(library(L), T),
    '$tea_concat'(T, ' is not among the libraries a tea block may name (lists, clpfd/clpz, apply, aggregate, between, dif, pairs, charsio, format, error, assoc, ordsets; all loaded already)', Why).

% '$tea_unsafe_goal'(+Goal, -Why): Goal (a body) calls something the sandbox refuses.
'$tea_unsafe_goal'(G, _) :- var(G), !, fail.
'$tea_unsafe_goal'(M:G, Why) :- !,
    '$tea_text'(M:G, T),
    '$tea_concat'(T, ': a block calls no other module''s predicates (tea''s sandbox)', Why).
'$tea_unsafe_goal'((A, B), Why) :- !, ( '$tea_unsafe_goal'(A, Why) -> true ; '$tea_unsafe_goal'(B, Why) ).
'$tea_unsafe_goal'((A ; B), Why) :- !, ( '$tea_unsafe_goal'(A, Why) -> true ; '$tea_unsafe_goal'(B, Why) ).
'$tea_unsafe_goal'((A -> B), Why) :- !, ( '$tea_unsafe_goal'(A, Why) -> true ; '$tea_unsafe_goal'(B, Why) ).
'$tea_unsafe_goal'('*->'(A, B), Why) :- !, ( '$tea_unsafe_goal'(A, Why) -> true ; '$tea_unsafe_goal'(B, Why) ).
'$tea_unsafe_goal'(\+ A, Why) :- !, '$tea_unsafe_goal'(A, Why).
'$tea_unsafe_goal'(G, _) :- \+ callable(G), !, fail.
'$tea_unsafe_goal'(format(S, _, _), Why) :- !,
    (   var(S) -> fail ; '$tea_sink'(S) -> fail ; '$tea_refused'(format/3, Why) ).
'$tea_unsafe_goal'(G, Why) :-
    '$tea_db_goal'(G, How, Head), !,
    (   '$tea_unsafe_head'(How, Head, Why) -> true
    ;   G =.. [_, C], nonvar(C), C = (_ :- B), '$tea_unsafe_goal'(B, Why)
    ).
'$tea_unsafe_goal'(dynamic(S), Why) :- !, '$tea_unsafe_spec'(S, Why).
'$tea_unsafe_goal'(G, Why) :-
    functor(G, F, N),
    (   atom_chars(F, ['$'|_]) -> '$tea_refused'(F/N, Why)
    ;   '$tea_meta_spec'(F, N, Specs) ->
        G =.. [_|Args], '$tea_nth_goal'(Specs, Args, AG), '$tea_unsafe_goal'(AG, Why)
    ;   '$tea_pure'(F, N) -> fail
    ;   '$tea_own'(G) -> fail
    ;   '$tea_known'(G) -> '$tea_refused'(F/N, Why)
    ;   '$tea_outside'(F, N) -> '$tea_refused'(F/N, Why)
    ;   fail
    ).

% Predicates of the libraries a block cannot load (os, files, process, sockets, http, ffi,
% time, …): they do not exist in the machine's user module, so a call would be an existence
% error anyway; named here so that a block that calls one is refused when it loads.
'$tea_outside'(F, N) :- memberchk(F/N, [shell/1, shell/2, getenv/2, setenv/2, unsetenv/1,
    pid/1, process_create/3, process_wait/2, process_kill/1, directory_files/2, delete_file/1,
    rename_file/2, file_exists/1, directory_exists/1, make_directory/1,
    make_directory_path/1, delete_directory/1, working_directory/2, file_size/2,
    file_modification_time/2, path_canonical/2, socket_client_open/3, socket_server_open/2,
    socket_server_accept/4, http_open/3, http_listen/2, foreign_struct/2, use_foreign_module/2,
    sleep/1, phrase_from_file/2, phrase_from_file/3, current_time/1, format_time/3,
    crypto_n_random_bytes/2, halt/0, halt/1, bb_put/2, bb_get/2, bb_b_put/2, call_cleanup/2,
    setup_call_cleanup/3, call_with_inference_limit/3, call_residue_vars/2, partial_string/3,
    map_assoc/2, map_assoc/3, phrase/2, phrase/3, phrase/4, phrase/5, listing/1, op/3, set_prolog_flag/2, assertz/2, asserta/2,
    consult/1, use_module/1, use_module/2, ensure_loaded/1, open/3, open/4]).

% A predicate of the block's own: a dynamic one of the user module (tea's are '$…' or listed).
'$tea_own'(G) :- catch(predicate_property(G, dynamic), _, fail).

% assert/retract: what they do to which head.
'$tea_db_goal'(assertz(C), define, H) :- '$tea_clause_head'(C, H).
'$tea_db_goal'(asserta(C), define, H) :- '$tea_clause_head'(C, H).
'$tea_db_goal'(assert(C), define, H) :- '$tea_clause_head'(C, H).
'$tea_db_goal'(retract(C), retract, H) :- '$tea_clause_head'(C, H).
'$tea_db_goal'(retractall(H), retract, H).
'$tea_clause_head'(C, H) :- ( nonvar(C), C = (H0 :- _) -> H = H0 ; H = C ).

% A goal argument of a meta-predicate call, extended by its extra arguments (closures).
'$tea_nth_goal'([S|_], [A|_], AG) :- nonvar(A), '$tea_spec_goal'(S, A, AG).
'$tea_nth_goal'([_|Ss], [_|As], AG) :- '$tea_nth_goal'(Ss, As, AG).
'$tea_spec_goal'(0, A, A).
'$tea_spec_goal'(^, A, G) :- '$tea_strip_carets'(A, G).
'$tea_spec_goal'(N, A, G) :- integer(N), N > 0, '$tea_extend'(A, N, G).
'$tea_strip_carets'(A, G) :- ( nonvar(A), A = _^B -> '$tea_strip_carets'(B, G) ; G = A ).

'$tea_refused'(PI, Why) :-
    '$tea_text'(PI, T),
    '$tea_concat'(T, ' is not among the predicates a tea block may call (pure computation only: no files, streams, flags, operators, modules, global variables or process; tea''s sandbox)', Why).

% The meta-predicates a block may call, with their arguments: - (data), 0 (a goal), N (a closure
% called with N more arguments), ^ (a goal under V^). call/N and maplist/N for any N.
'$tea_meta_spec'(call, N, [K|Ds]) :- integer(N), N >= 1, K is N - 1, '$tea_data'(K, Ds).
'$tea_meta_spec'(once, 1, [0]).
'$tea_meta_spec'(ignore, 1, [0]).
'$tea_meta_spec'(not, 1, [0]).
'$tea_meta_spec'(findall, 3, [-, 0, -]).
'$tea_meta_spec'(findall, 4, [-, 0, -, -]).
'$tea_meta_spec'(bagof, 3, [-, ^, -]).
'$tea_meta_spec'(setof, 3, [-, ^, -]).
'$tea_meta_spec'(^, 2, [-, 0]).
'$tea_meta_spec'(aggregate_all, 3, [-, 0, -]).
'$tea_meta_spec'(forall, 2, [0, 0]).
'$tea_meta_spec'(catch, 3, [0, -, 0]).
'$tea_meta_spec'(maplist, N, [K|Ds]) :- integer(N), N >= 2, K is N - 1, '$tea_data'(K, Ds).
'$tea_meta_spec'(foldl, N, [K|Ds]) :- integer(N), N >= 4, K is N - 1, '$tea_data'(K, Ds).
'$tea_meta_spec'(include, 3, [1, -, -]).
'$tea_meta_spec'(exclude, 3, [1, -, -]).
'$tea_meta_spec'(partition, 4, [1, -, -, -]).
'$tea_meta_spec'(map_list_to_pairs, 3, [2, -, -]).
'$tea_data'(K, Ds) :- length(Ds, K), maplist(=(-), Ds).

% The pure predicates a block may call.
'$tea_pure'(F, N) :- '$tea_pure_list'(L), memberchk(F/N, L), !.
'$tea_pure_list'([
    true/0, fail/0, false/0, !/0, repeat/0, throw/1,
    (=)/2, (\=)/2, (==)/2, (\==)/2, (@<)/2, (@>)/2, (@=<)/2, (@>=)/2, compare/3,
    unify_with_occurs_check/2, dif/2,
    (is)/2, (=:=)/2, (=\=)/2, (<)/2, (>)/2, (=<)/2, (>=)/2, succ/2, plus/3, between/3, numlist/3,
    var/1, nonvar/1, atom/1, number/1, integer/1, float/1, atomic/1, compound/1, callable/1,
    is_list/1, ground/1, string/1, is_dict/1, is_assoc/1,
    functor/3, arg/3, (=..)/2, copy_term/2, term_variables/2,
    atom_codes/2, atom_chars/2, char_code/2, atom_length/2, atom_concat/3, sub_atom/5,
    number_codes/2, number_chars/2, char_type/2, code_type/2, atom_number/2, upcase_atom/2,
    downcase_atom/2, term_to_atom/2, atom_to_term/3, read_term_from_chars/3,
    write_term_to_chars/3,
    string_concat/3, string_chars/2, string_codes/2, string_to_atom/2, string_length/2,
    string_lower/2, string_upper/2, atom_string/2, number_string/2, term_string/2,
    sub_string/5, split_string/4, atomic_list_concat/2, atomic_list_concat/3,
    append/3, append/2, member/2, memberchk/2, length/2, nth0/3, nth1/3, nth0/4, nth1/4,
    reverse/2, last/2, msort/2, sort/2, sort/4, keysort/2, permutation/2, list_to_set/2,
    sum_list/2, sumlist/2, max_list/2, min_list/2, max_member/2, min_member/2, list_max/2,
    list_min/2, select/3, selectchk/3, select/4, subtract/3, delete/3, same_length/2,
    transpose/2,
    list_to_ord_set/2, ord_union/2, ord_union/3, ord_subtract/3, ord_memberchk/2,
    ord_intersection/3, ord_subset/2, ord_add_element/3, ord_del_element/3, is_ordset/1,
    ord_empty/1, ord_symdiff/3, ord_seteq/2, ord_intersect/2, ord_disjoint/2, ord_selectchk/3,
    ord_union/4, ord_intersection/2, ord_intersection/4, ord_intersect/3,
    subsumes_term/2, copy_term/3, numbervars/3, read_from_chars/2, chars_base64/3,
    chars_utf8bytes/2, gen_int/1, gen_nat/1, repeat/1, portray_clause/1,
    pairs_keys_values/3, pairs_keys/2, pairs_values/2, group_pairs_by_key/2,
    empty_assoc/1, put_assoc/4, get_assoc/3, get_assoc/5, list_to_assoc/2,
    ord_list_to_assoc/2, assoc_to_list/2, assoc_to_keys/2, assoc_to_values/2, gen_assoc/3,
    max_assoc/3, min_assoc/3, del_assoc/4, del_min_assoc/4, del_max_assoc/4,
    (#=)/2, (#\=)/2, (#<)/2, (#>)/2, (#=<)/2, (#>=)/2, (#\)/1, (#\)/2, (#<==>)/2, (#==>)/2,
    (#<==)/2, (#\/)/2, (#/\)/2, (in)/2, (ins)/2, label/1, labeling/2, indomain/1,
    all_different/1, all_distinct/1, sum/3, scalar_product/4, tuples_in/2, lex_chain/1,
    serialized/2, global_cardinality/2, global_cardinality/3, circuit/1, cumulative/1,
    cumulative/2, disjoint2/1, element/3, automaton/3, automaton/8, zcompare/3, chain/2,
    fd_var/1, fd_inf/2, fd_sup/2, fd_size/2, fd_dom/2, nvalue/2,
    write/1, print/1, writeln/1, nl/0, writeq/1, write_canonical/1, write_term/2, tab/1,
    print_message/2, format/1, format/2, format/3,
    state/2, return/2,
    get_dict/3, put_dict/4, dict_pairs/3, nb_setval/2, b_setval/2, nb_getval/2, b_getval/2,
    succ_or_fail/1
]).

'$tea_extend'(G, 0, G) :- !.
'$tea_extend'(G, N, G1) :-
    (   G = _:_ -> G1 = G
    ;   callable(G) -> G =.. L0, length(Xs, N), append(L0, Xs, L1), G1 =.. L1
    ;   G1 = G
    ).

% A goal known only when the block runs: checked, then guarded, then called.
'$tea_safe_call'(G) :-
    (   var(G) -> throw(error(instantiation_error, call/1))
    ;   '$tea_unsafe_goal'(G, Why) -> throw(error(permission_error(call, sandboxed, G), Why))
    ;   '$tea_guard'(G, Guarded),
        (   Guarded = '$tea_safe_call'(G1), G1 == G
        ->  (   '$tea_known'(G) -> call(G) ; '$tea_unknown'(G) )
        ;   call(Guarded)
        )
    ).

% A predicate of the machine (not one no library defines).
'$tea_known'(G) :-
    (   catch(predicate_property(G, _), _, fail) -> true
    ;   functor(G, F, N), catch(current_predicate(F/N), _, fail)
    ).

% A goal no predicate answers: an existence error that says what a block may call.
'$tea_unknown'(G) :-
    functor(G, F, N),
    '$tea_text'(F/N, T),
    '$tea_concat'(T, ' does not exist (existence_error): a tea block calls its own predicates and the pure ones tea allows, nothing else', Why),
    throw(error(existence_error(procedure, F/N), Why)).

% A closure known only when the block runs, called with its extra arguments (by maplist/N,
% foldl/N, include/3…: as many as they pass).
'$tea_checked'(C, A) :- '$tea_call_closure'(C, [A]).
'$tea_checked'(C, A, B) :- '$tea_call_closure'(C, [A, B]).
'$tea_checked'(C, A, B, D) :- '$tea_call_closure'(C, [A, B, D]).
'$tea_checked'(C, A, B, D, E) :- '$tea_call_closure'(C, [A, B, D, E]).
'$tea_checked'(C, A, B, D, E, F) :- '$tea_call_closure'(C, [A, B, D, E, F]).
'$tea_checked'(C, A, B, D, E, F, G) :- '$tea_call_closure'(C, [A, B, D, E, F, G]).
'$tea_checked'(C, A, B, D, E, F, G, H) :- '$tea_call_closure'(C, [A, B, D, E, F, G, H]).
'$tea_checked'(C, A, B, D, E, F, G, H, I) :- '$tea_call_closure'(C, [A, B, D, E, F, G, H, I]).
'$tea_checked'(C, A, B, D, E, F, G, H, I, J) :- '$tea_call_closure'(C, [A, B, D, E, F, G, H, I, J]).
'$tea_call_closure'(C, Extra) :-
    (   var(C) -> throw(error(instantiation_error, call/2))
    ;   C = _:_ -> '$tea_safe_call'(C)
    ;   callable(C) -> C =.. L0, append(L0, Extra, L1), G =.. L1, '$tea_safe_call'(G)
    ;   throw(error(type_error(callable, C), call/2))
    ).

% assertz/asserta/assert/retract/retractall: the head the block's own (not tea's or the
% machine's), an asserted clause's body guarded, its size bounded.
'$tea_db'(Which, C) :-
    '$tea_db_goal'(Which, How, H),
    (   var(H) -> throw(error(instantiation_error, Which))
    ;   '$tea_unsafe_head'(How, H, Why) -> throw(error(permission_error(modify, static_procedure, H), Why))
    ;   How == define
    ->  (   nonvar(C), C = (H :- B)
        ->  (   '$tea_unsafe_goal'(B, Why) -> throw(error(permission_error(call, sandboxed, B), Why)) ; true ),
            '$tea_guard'(B, GB), C2 = (H :- GB)
        ;   C2 = C
        ),
        '$tea_limits'(limits(_, _, _, AssertUnits, _, _)),
        '$tea_bounded'(C2, AssertUnits, 'an asserted clause'),
        functor(Which, F0, _), ( F0 == assert -> F = assertz ; F = F0 ), G =.. [F, C2], call(G)
    ;   call(Which)
    ).

% `length(L, N)`, `functor(T, F, N)`: a size beyond the limit is refused before it is built (each
% is one inference however large).
'$tea_length'(L, N) :-
    '$tea_limits'(limits(_, _, _, _, MaxList, _)),
    (   integer(N), N > MaxList -> '$tea_too_big'(length/2, N, MaxList) ; length(L, N) ).
'$tea_functor'(T, F, N) :-
    '$tea_limits'(limits(_, _, _, _, MaxList, _)),
    (   integer(N), N > MaxList -> '$tea_too_big'(functor/3, N, MaxList) ; functor(T, F, N) ).
% atom_concat/3: an atom longer than the text limit is refused before it is built.
'$tea_atom_concat'(A, B, C) :-
    '$tea_limits'(limits(_, _, _, _, _, MaxText)),
    (   atomic(A), atomic(B),
        '$tea_atomic_length'(A, LA), '$tea_atomic_length'(B, LB), LA + LB > MaxText
    ->  '$tea_too_big'(atom_concat/3, LA + LB, MaxText)
    ;   atom_concat(A, B, C)
    ).
'$tea_atomic_length'(A, L) :- ( atom(A) -> atom_length(A, L) ; number_chars(A, Cs), length(Cs, L) ).
'$tea_too_big'(PI, N, Max) :-
    V is N,
    '$tea_text'(PI, P), '$tea_text'(V, T), '$tea_text'(Max, M),
    atomic_list_concat([P, ' of size ', T, ' is beyond tea''s limit of ', M, ' (a block''s memory is bounded)'], Why),
    throw(error(resource_error(memory), Why)).

% Rewrites a goal so that every goal it calls is checked: goals held in variables when they
% are called, closures when they are called with their arguments, asserted clauses' bodies;
% predicates not yet known (the block's own, asserted later, or none) when they are called.
'$tea_guard'(G, '$tea_safe_call'(G)) :- var(G), !.
'$tea_guard'(M:G, '$tea_safe_call'(M:G)) :- !.
'$tea_guard'((A, B), (GA, GB)) :- !, '$tea_guard'(A, GA), '$tea_guard'(B, GB).
'$tea_guard'((A ; B), (GA ; GB)) :- !, '$tea_guard'(A, GA), '$tea_guard'(B, GB).
'$tea_guard'((A -> B), (GA -> GB)) :- !, '$tea_guard'(A, GA), '$tea_guard'(B, GB).
'$tea_guard'('*->'(A, B), '*->'(GA, GB)) :- !, '$tea_guard'(A, GA), '$tea_guard'(B, GB).
'$tea_guard'(\+ A, \+ GA) :- !, '$tea_guard'(A, GA).
'$tea_guard'(G, G) :- \+ callable(G), !.
'$tea_guard'(format(S, F, A), '$tea_format'(S, F, A)) :- !.
'$tea_guard'(format(F, A), '$tea_format'(F, A)) :- !.
'$tea_guard'(length(L, N), '$tea_length'(L, N)) :- !.
'$tea_guard'(functor(T, F, N), '$tea_functor'(T, F, N)) :- !.
'$tea_guard'(atom_concat(A, B, C), '$tea_atom_concat'(A, B, C)) :- !.
'$tea_guard'(dynamic(S), '$tea_dynamic'(S)) :- !.
'$tea_guard'(G, '$tea_acyclic'(G, Args)) :- '$tea_cycle_args'(G, Args), !.
'$tea_guard'(G, '$tea_db'(G, C)) :- '$tea_db_goal'(G, _, _), !, arg(1, G, C).
'$tea_guard'(G, Guarded) :-
    G =.. [call, C|Extra], Extra \== [], !,
    (   var(C) -> Guarded = '$tea_call_closure'(C, Extra)
    ;   '$tea_extend_list'(C, Extra, G1) -> '$tea_guard'(G1, Guarded)
    ;   Guarded = '$tea_call_closure'(C, Extra)
    ).
'$tea_guard'(G, Guarded) :-
    functor(G, F, N), '$tea_meta_spec'(F, N, Specs), !,
    G =.. [F|Args],
    maplist('$tea_guard_arg', Specs, Args, NewArgs),
    Guarded =.. [F|NewArgs].
'$tea_guard'(G, G) :- functor(G, F, N), '$tea_pure'(F, N), !.
'$tea_guard'(G, G) :- '$tea_own'(G), \+ '$tea_unsafe_goal'(G, _), !.
'$tea_guard'(G, '$tea_safe_call'(G)).

% Built-ins that would run without end (and outside the inference limit) on a cyclic list:
% their list arguments are checked first.
'$tea_cycle_args'(atom_chars(_, L), [L]).
'$tea_cycle_args'(atom_codes(_, L), [L]).
'$tea_cycle_args'(number_chars(_, L), [L]).
'$tea_cycle_args'(number_codes(_, L), [L]).
'$tea_cycle_args'(sort(L, _), [L]).
'$tea_cycle_args'(keysort(L, _), [L]).
'$tea_cycle_args'(sort(_, _, L, _), [L]).
'$tea_cycle_args'(_ =.. L, [L]).
'$tea_cycle_args'(read_term_from_chars(L, _, _), [L]).
'$tea_cycle_args'(chars_base64(A, B, _), [A, B]).

'$tea_acyclic'(G, Args) :-
    (   maplist(acyclic_term, Args) -> call(G)
    ;   functor(G, F, N), '$tea_text'(F/N, T),
        '$tea_concat'(T, ' was given a cyclic term, which tea does not let a block pass to it (it would never end)', Why),
        throw(error(resource_error(cyclic_term), Why))
    ).

'$tea_dynamic'(S) :-
    (   '$tea_unsafe_spec'(S, Why) -> throw(error(permission_error(modify, static_procedure, S), Why))
    ;   '$tea_declare'(S)
    ).

'$tea_extend_list'(C, Extra, G) :-
    C \= _:_, callable(C), C =.. L0, append(L0, Extra, L1), G =.. L1.

'$tea_guard_arg'(-, A, A).
'$tea_guard_arg'(0, A, G) :- '$tea_guard'(A, G).
'$tea_guard_arg'(^, A, G) :-
    (   nonvar(A), A = V^B -> G = V^GB, '$tea_guard_arg'(^, B, GB)
    ;   '$tea_guard'(A, G)
    ).
'$tea_guard_arg'(N, A, Closure) :-
    integer(N), N > 0,
    (   nonvar(A), A \= _:_, callable(A), '$tea_extend'(A, N, G), '$tea_guard'(G, G1), G1 == G
    ->  Closure = A
    ;   Closure = '$tea_checked'(A)
    ).

% '$tea_bounded'(+Term, +MaxUnits, +What): Term is at most MaxUnits units (a cell each, an atom
% its length more) and at most '$tea_limits' depth deep (a list's items one deeper than the
% list, its tail not); counted with a stack of its own, so any term, cyclic ones too, is
% measured in bounded time.
'$tea_bounded'(T, MaxUnits, What) :-
    '$tea_limits'(limits(_, _, MaxDepth, _, _, _)),
    '$tea_walk'([T-0], 0, MaxUnits, MaxDepth, What).
'$tea_walk'([], _, _, _, _).
'$tea_walk'([T-D|Ts], N0, Max, MaxD, What) :-
    (   var(T) -> N = N0 + 1, Ts1 = Ts
    ;   D > MaxD -> '$tea_too_deep'(What, MaxD)
    ;   atom(T) -> atom_length(T, L), N = N0 + 1 + L, Ts1 = Ts
    ;   T = [H|R] -> N = N0 + 1, D1 is D + 1, Ts1 = [H-D1, R-D|Ts]
    ;   compound(T) -> T =.. [_|As], N = N0 + 1, D1 is D + 1, '$tea_push'(As, D1, Ts, Ts1)
    ;   N = N0 + 1, Ts1 = Ts
    ),
    N1 is N,
    (   N1 > Max -> '$tea_too_big'(What, N1, Max) ; '$tea_walk'(Ts1, N1, Max, MaxD, What) ).
'$tea_push'([], _, Ts, Ts).
'$tea_push'([A|As], D, Ts0, [A-D|Ts]) :- '$tea_push'(As, D, Ts0, Ts).
'$tea_too_deep'(What, MaxD) :-
    '$tea_text'(What, W), '$tea_text'(MaxD, M),
    atomic_list_concat([W, ' is nested deeper than tea''s limit of ', M, ' levels'], Why),
    throw(error(resource_error(term_depth), Why)).

% --- Running a block ------------------------------------------------------------------------------

% '$tea_run'(+Mode, +State, +Clauses, +Limits, -Result): State is a list Key=Value, Limits is
% limits(Inferences, ReturnUnits, Depth, AssertUnits, MaxList, MaxText). Result is ok(Json),
% failed(Line), error(Line, Message) or limit(Line). Mode block: Json is the text of the object
% return/2 wrote (the last write of a key wins); mode query (prolog.query): of the bindings of
% the last query that succeeded, Name=Value. Every value crosses to Rust as JSON text in one
% atom, bounded in size and depth, never as a Prolog term.
'$tea_run'(Mode, State, Clauses, Limits, Result) :-
    '$tea_forget',
    assertz('$tea_limits'(Limits)),
    forall(member(K=V, State), assertz(state(K, V))),
    Limits = limits(Inferences, ReturnUnits, _, _, _, _),
    (   catch('$tea_clauses'(Clauses, Mode, Inferences, [], Bs, Result0), E, Result0 = error(0, E))
    ->  true
    ;   Result0 = failed(0)
    ),
    (   Result0 == ok, Mode = query(_)
    ->  catch(( '$tea_bounded'(Bs, ReturnUnits, 'the bindings of the query'),
                '$tea_object_text'(Bs, Json), Result = ok(Json) ),
              E2, '$tea_error_result'(0, E2, Result))
    ;   Result0 == ok
    ->  findall(K1-J, '$tea_return'(K1, J), Returns),
        '$tea_returns_text'(Returns, Json), Result = ok(Json)
    ;   Result0 = error(Line, E1), \+ atom(E1)
    ->  '$tea_error_result'(Line, E1, Result)
    ;   Result = Result0
    ),
    '$tea_forget'.

'$tea_error_result'(Line, E, error(Line, Message)) :-
    '$tea_describe'(E, Message0), '$tea_clip'(Message0, Message).

% A message of at most 2000 characters.
'$tea_clip'(M0, M) :-
    atom_length(M0, L),
    (   L =< 2000 -> M = M0
    ;   sub_atom(M0, 0, 2000, _, Head), atom_concat(Head, '…', M)
    ).

% '$tea_clauses'(+Clauses, +Mode, +Limit, +Bs0, -Bs, -Result): Bs the bindings of the last query
% that succeeded (mode query; [] in mode block, which keeps none).
'$tea_clauses'(Clauses, Mode, Limit, Bs0, Bs, Result) :-
    '$tea_predeclare'(Clauses),
    '$tea_clauses_'(Clauses, Mode, Limit, Bs0, Bs, Result).
'$tea_clauses_'([], _, _, Bs, Bs, ok).
'$tea_clauses_'([c(Line, Codes)|Cs], Mode, Limit, Bs0, Bs, Result) :-
    '$tea_read'(Codes, Term, Vs, Error),
    (   Error \== none
    ->  Result = error(Line, Error), Bs = Bs0
    ;   '$tea_kind'(Term, Kind0),
        '$tea_bind'(Mode, Kind0, Vs),
        '$tea_kind'(Term, Kind),
        catch('$tea_do'(Kind, Line, Limit, R), E, R = error(Line, E)),
        (   R == ok, Kind = query(_), Mode = query(_)
        ->  findall(N=V, ( member(N=V, Vs), \+ atom_chars(N, ['_'|_]) ), Bs1)
        ;   Bs1 = Bs0
        ),
        (   R == ok -> '$tea_clauses_'(Cs, Mode, Limit, Bs1, Bs, Result)
        ;   Result = R, Bs = Bs1
        )
    ).

% prolog.query's bindings (Name=Value; '$tea_chars'(Atom) is Atom's characters): the variables
% the loader made of `{{ }}` (named _Tea…) in every clause, the others in queries and directives.
'$tea_bind'(block, _, _) :- !.
'$tea_bind'(query(Args), Kind, Vs) :-
    (   ( Kind = query(_) ; Kind = directive(_) ) -> All = true ; All = false ),
    '$tea_bind_vars'(Vs, Args, All).
'$tea_bind_vars'([], _, _).
'$tea_bind_vars'([N=V|Vs], Args, All) :-
    (   memberchk(N=V0, Args), ( All == true ; atom_concat('_Tea', _, N) )
    ->  ( nonvar(V0), V0 = '$tea_chars'(A) -> atom_chars(A, Cs), V = Cs ; V = V0 )
    ;   true
    ),
    '$tea_bind_vars'(Vs, Args, All).

% The predicates a block's facts and rules define are declared (dynamic) before it runs, so that
% its queries and rules call them directly.
'$tea_predeclare'(Clauses) :-
    forall(( member(c(_, Codes), Clauses),
             '$tea_read'(Codes, Term, none),
             '$tea_kind'(Term, Kind),
             ( Kind = fact(H) ; Kind = rule(H, _) ),
             callable(H), H \= _:_, \+ '$tea_unsafe_head'(H, _),
             functor(H, F, N) ),
           catch('$tea_declare'(F/N), _, true)).

'$tea_do'(fact(Head), _, _, ok) :- assertz(Head).
'$tea_do'(rule(Head, Body), _, _, ok) :- '$tea_guard'(Body, Guarded), assertz((Head :- Guarded)).
'$tea_do'(directive(dynamic(Spec)), _, _, ok) :- !, '$tea_dynamic'(Spec).
'$tea_do'(directive(Body), Line, Limit, R) :-
    (   '$tea_quiet_directive'(Body) -> R = ok
    ;   '$tea_do'(query(Body), Line, Limit, R)
    ).
'$tea_do'(query(Goal), Line, Limit, R) :-
    '$tea_guard'(Goal, Guarded),
    (   catch(call_with_inference_limit(Guarded, Limit, Outcome), E, (Outcome = thrown(E)))
    ->  (   Outcome == inference_limit_exceeded -> R = limit(Line)
        ;   Outcome = thrown(E1) -> R = error(Line, E1)
        ;   R = ok
        )
    ;   R = failed(Line)
    ).

% `:- dynamic(F/N)`: F/N is defined with no clauses, so calling it fails instead of raising an
% existence error (as in SWI-Prolog; each run asserts its clauses as dynamic ones anyway).
'$tea_declare'(Spec) :- var(Spec), !.
'$tea_declare'((A, B)) :- !, '$tea_declare'(A), '$tea_declare'(B).
'$tea_declare'([]) :- !.
'$tea_declare'([S|Ss]) :- !, '$tea_declare'(S), '$tea_declare'(Ss).
'$tea_declare'(F/N) :-
    atom(F), integer(N), N >= 0, N =< 255, !,
    functor(H, F, N),
    (   catch(predicate_property(H, dynamic), _, fail) -> true
    ;   catch(predicate_property(H, _), _, fail) -> true
    ;   catch((assertz(H), retract(H)), _, true)
    ).
'$tea_declare'(_).

'$tea_quiet_directive'(use_module(_)).
'$tea_quiet_directive'(use_module(_, _)).
'$tea_quiet_directive'(ensure_loaded(_)).
'$tea_quiet_directive'(discontiguous(_)).
'$tea_quiet_directive'(table(_)).
'$tea_quiet_directive'(set_prolog_flag(double_quotes, _)).

% Every clause a run asserted (the block's facts and rules, what its queries asserted, the
% state, the returns, nb_setval/2's values): all dynamic predicates of the user module are
% emptied, so nothing of a run is seen by the next (nor by another agent of the process).
'$tea_forget' :-
    forall(( current_predicate(F/N), functor(H, F, N), catch(predicate_property(H, dynamic), _, fail) ),
           catch(retractall(H), _, true)).

'$tea_key'(K, K) :- atom(K), !.
'$tea_key'(K, A) :- '$tea_text'(K, A).

% return(Key, Value): Value is checked against the limits and kept as its JSON text (one atom),
% so that nothing large is compiled into a clause.
return(Key, Value) :-
    '$tea_limits'(limits(_, ReturnUnits, _, _, _, _)),
    '$tea_bounded'(Key-Value, ReturnUnits, 'a returned value'),
    '$tea_key'(Key, K),
    '$tea_json_text'(Value, J),
    assertz('$tea_return'(K, J)).

% The text of the object of the returns, K-JsonText in the order written.
'$tea_returns_text'(Returns, Json) :-
    '$tea_returns_chars'(Returns, first, Cs, ['}']),
    atom_chars(Json, ['{'|Cs]).
'$tea_returns_chars'([], _, Cs, Cs).
'$tea_returns_chars'([K-J|Rs], Sep, Cs0, Cs) :-
    ( Sep == first -> Cs0 = Cs1 ; Cs0 = [','|Cs1] ),
    atom_chars(K, KCs), '$tea_json_string'(KCs, Cs1, [':'|Cs2]),
    atom_chars(J, JCs), append(JCs, Cs3, Cs2),
    '$tea_returns_chars'(Rs, next, Cs3, Cs).

% The text of the object of a query's bindings, Name=Value.
'$tea_object_text'(Bs, Json) :-
    '$tea_pairs_chars'(Bs, first, Cs, ['}']),
    atom_chars(Json, ['{'|Cs]).

% A value as JSON text: numbers, atoms (true, false and null are JSON's; others strings), chars
% (a string), lists, json([Key=Value, …]) (an object); anything else as its text. An unbound
% variable is null.
'$tea_json_text'(V, J) :- '$tea_json_chars'(V, Cs, []), atom_chars(J, Cs).

'$tea_json_chars'(V, Cs0, Cs) :- var(V), !, '$tea_literal'(null, Cs0, Cs).
'$tea_json_chars'(V, Cs0, Cs) :- integer(V), !,
    (   V >= -9223372036854775808, V =< 18446744073709551615
    ->  number_chars(V, Ns), append(Ns, Cs, Cs0)
    ;   '$tea_text'(V, T),
        atomic_list_concat(['the integer ', T, ', which does not fit in 64 bits (JSON numbers here do)'], Why),
        throw(error(representation_error(json_number), Why))
    ).
'$tea_json_chars'(V, Cs0, Cs) :- float(V), !, '$tea_float_chars'(V, Cs0, Cs).
'$tea_json_chars'(V, Cs0, Cs) :- number(V), !,
    (   catch(F is float(V), _, fail) -> '$tea_float_chars'(F, Cs0, Cs)
    ;   '$tea_text'(V, T), atom_chars(T, TCs), '$tea_json_string'(TCs, Cs0, Cs)
    ).
'$tea_json_chars'([], Cs0, Cs) :- !, '$tea_literal'('[]', Cs0, Cs).
'$tea_json_chars'(V, Cs0, Cs) :- atom(V), !,
    (   memberchk(V, [true, false, null]) -> '$tea_literal'(V, Cs0, Cs)
    ;   atom_chars(V, VCs), '$tea_json_string'(VCs, Cs0, Cs)
    ).
'$tea_json_chars'(V, Cs0, Cs) :- '$tea_chars'(V), !, '$tea_json_string'(V, Cs0, Cs).
'$tea_json_chars'(json(Pairs), ['{'|Cs0], Cs) :- is_list(Pairs), '$tea_pairs_chars'(Pairs, first, Cs0, ['}'|Cs]), !.
'$tea_json_chars'(V, ['['|Cs0], Cs) :- is_list(V), !, '$tea_items_chars'(V, first, Cs0, [']'|Cs]).
'$tea_json_chars'(V, Cs0, Cs) :- '$tea_text'(V, T), atom_chars(T, TCs), '$tea_json_string'(TCs, Cs0, Cs).

'$tea_literal'(A, Cs0, Cs) :- atom_chars(A, L), append(L, Cs, Cs0).

'$tea_float_chars'(F, Cs0, Cs) :-
    number_chars(F, Ns),
    (   ( memberchk(n, Ns) ; memberchk(i, Ns) )
    ->  '$tea_text'(F, T),
        atomic_list_concat(['the float ', T, ', which JSON cannot hold'], Why),
        throw(error(representation_error(json_number), Why))
    ;   append(Ns, Cs, Cs0)
    ).

'$tea_items_chars'([], _, Cs, Cs).
'$tea_items_chars'([V|Vs], Sep, Cs0, Cs) :-
    ( Sep == first -> Cs0 = Cs1 ; Cs0 = [','|Cs1] ),
    '$tea_json_chars'(V, Cs1, Cs2),
    '$tea_items_chars'(Vs, next, Cs2, Cs).

'$tea_pairs_chars'([], _, Cs, Cs).
'$tea_pairs_chars'([P|Ps], Sep, Cs0, Cs) :-
    nonvar(P), ( P = (K0=V) ; P = (K0-V) ; P = (K0:V) ), !,
    ( Sep == first -> Cs0 = Cs1 ; Cs0 = [','|Cs1] ),
    '$tea_key'(K0, K), atom_chars(K, KCs),
    '$tea_json_string'(KCs, Cs1, [':'|Cs2]),
    '$tea_json_chars'(V, Cs2, Cs3),
    '$tea_pairs_chars'(Ps, next, Cs3, Cs).

% Characters as a JSON string: quoted, `"` and `\` escaped, control characters as \u00XX.
'$tea_json_string'(Chars, ['"'|Cs0], Cs) :- '$tea_escape'(Chars, Cs0, ['"'|Cs]).
'$tea_escape'([], Cs, Cs).
'$tea_escape'([C|Rest], Cs0, Cs) :-
    char_code(C, Code),
    (   Code =:= 34 -> char_code(B, 92), Cs0 = [B, C|Cs1]
    ;   Code =:= 92 -> Cs0 = [C, C|Cs1]
    ;   Code < 32
    ->  H1 is Code >> 4, H2 is Code /\ 15,
        '$tea_hex'(H1, X1), '$tea_hex'(H2, X2), char_code(B, 92),
        Cs0 = [B, u, '0', '0', X1, X2|Cs1]
    ;   Cs0 = [C|Cs1]
    ),
    '$tea_escape'(Rest, Cs1, Cs).
'$tea_hex'(N, C) :- nth0(N, ['0','1','2','3','4','5','6','7','8','9',a,b,c,d,e,f], C).

'$tea_chars'([C|Cs]) :- is_list(Cs), maplist('$tea_char', [C|Cs]).
'$tea_char'(C) :- atom(C), atom_length(C, 1).

% --- SWI-Prolog's predicates that The Edge Agent's blocks use --------------------------------------

'$tea_to_chars'(T, Cs) :-
    (   var(T) -> throw(error(instantiation_error, text/1))
    ;   atom(T) -> atom_chars(T, Cs)
    ;   number(T) -> number_chars(T, Cs)
    ;   is_list(T), maplist(atom, T) -> Cs = T
    ;   is_list(T) -> maplist('$tea_code_char', T, Cs)
    ;   throw(error(type_error(text, T), text/1))
    ).

string(S) :- '$tea_chars'(S).
is_list(L) :- var(L), !, fail.
is_list([]).
is_list([_|T]) :- is_list(T).
string_concat(A, B, C) :-
    (   nonvar(A), nonvar(B)
    ->  '$tea_to_chars'(A, As), '$tea_to_chars'(B, Bs), append(As, Bs, C)
    ;   '$tea_to_chars'(C, Cs), append(As, Bs, Cs), A = As, B = Bs
    ).
string_chars(S, Cs) :- ( nonvar(S) -> '$tea_to_chars'(S, Cs) ; S = Cs ).
string_codes(S, Codes) :- ( nonvar(S) -> '$tea_to_chars'(S, Cs), maplist(char_code, Cs, Codes) ; maplist(char_code, S, Codes) ).
string_to_atom(S, A) :- ( nonvar(S) -> '$tea_to_chars'(S, Cs), atom_chars(A, Cs) ; atom_chars(A, S) ).
string_length(S, N) :- '$tea_to_chars'(S, Cs), length(Cs, N).
string_lower(S, L) :- '$tea_to_chars'(S, Cs), maplist('$tea_lower', Cs, L).
string_upper(S, U) :- '$tea_to_chars'(S, Cs), maplist('$tea_upper', Cs, U).
'$tea_code_char'(C0, C) :- ( integer(C0) -> char_code(C, C0) ; C = C0 ).
'$tea_lower'(C, L) :- ( char_type(C, upper(L0)) -> L = L0 ; L = C ).
'$tea_upper'(C, U) :- ( char_type(C, lower(U0)) -> U = U0 ; U = C ).
atom_string(A, S) :- ( nonvar(A) -> '$tea_to_chars'(A, S) ; '$tea_to_chars'(S, Cs), atom_chars(A, Cs) ).
number_string(N, S) :- ( nonvar(S) -> '$tea_to_chars'(S, Cs), number_chars(N, Cs) ; number_chars(N, S) ).
term_to_atom(T, A) :- ( nonvar(A) -> atom_chars(A, Cs), read_term_from_chars(Cs, T, []) ; '$tea_text'(T, A) ).
term_string(T, S) :- ( nonvar(S) -> '$tea_to_chars'(S, Cs), read_term_from_chars(Cs, T, []) ; write_term_to_chars(T, [quoted(true)], S) ).
sub_string(S, B, L, A, Sub) :-
    '$tea_to_chars'(S, Cs), atom_chars(SA, Cs),
    (   nonvar(Sub) -> '$tea_to_chars'(Sub, SubCs), atom_chars(SubA, SubCs) ; true ),
    sub_atom(SA, B, L, A, SubA),
    (   var(Sub) -> atom_chars(SubA, Sub) ; true ).
split_string(S, Sep, Pad, Parts) :-
    '$tea_to_chars'(S, Cs), '$tea_to_chars'(Sep, SepCs), '$tea_to_chars'(Pad, PadCs),
    '$tea_split'(Cs, SepCs, [], Raw),
    maplist('$tea_strip'(PadCs), Raw, Parts).
'$tea_split'([], _, Acc, [P]) :- reverse(Acc, P).
'$tea_split'([C|Cs], Seps, Acc, [P|Ps]) :- memberchk(C, Seps), !, reverse(Acc, P), '$tea_split'(Cs, Seps, [], Ps).
'$tea_split'([C|Cs], Seps, Acc, Ps) :- '$tea_split'(Cs, Seps, [C|Acc], Ps).
'$tea_strip'(Pad, Cs, S) :- '$tea_lstrip'(Pad, Cs, C1), reverse(C1, R1), '$tea_lstrip'(Pad, R1, R2), reverse(R2, S).
'$tea_lstrip'(Pad, [C|Cs], S) :- memberchk(C, Pad), !, '$tea_lstrip'(Pad, Cs, S).
'$tea_lstrip'(_, Cs, Cs).
atomic_list_concat(L, A) :- maplist('$tea_to_chars', L, Css), append(Css, Cs), atom_chars(A, Cs).
atomic_list_concat(L, Sep, A) :-
    (   ground(L)
    ->  '$tea_to_chars'(Sep, SepCs), maplist('$tea_to_chars', L, Css),
        '$tea_join'(Css, SepCs, Cs), atom_chars(A, Cs)
    ;   '$tea_to_chars'(A, Cs), '$tea_to_chars'(Sep, SepCs), SepCs = [S1|_],
        '$tea_split'(Cs, [S1], [], Parts), maplist('$tea_chars_atom', Parts, L)
    ).
'$tea_chars_atom'(P, X) :- atom_chars(X, P).
'$tea_join'([], _, []).
'$tea_join'([C], _, C) :- !.
'$tea_join'([C|Cs], Sep, Out) :- '$tea_join'(Cs, Sep, Rest), append(C, Sep, C1), append(C1, Rest, Out).
upcase_atom(A, U) :- '$tea_to_chars'(A, Cs), maplist('$tea_upper', Cs, Us), atom_chars(U, Us).
downcase_atom(A, L) :- '$tea_to_chars'(A, Cs), maplist('$tea_lower', Cs, Ls), atom_chars(L, Ls).
sumlist(L, S) :- sum_list(L, S).
writeln(T) :- write(T), nl.
print_message(_, _).
succ_or_fail(_).
last([X], X) :- !.
last([_|T], X) :- last(T, X).
aggregate_all(count, G, C) :- !, findall(x, G, L), length(L, C).
aggregate_all(count(T), G, C) :- !, findall(T, G, L), length(L, C).
aggregate_all(sum(E), G, S) :- !, findall(E, G, L), sum_list(L, S).
aggregate_all(max(E), G, M) :- !, findall(E, G, L), L \== [], max_list(L, M).
aggregate_all(min(E), G, M) :- !, findall(E, G, L), L \== [], min_list(L, M).
aggregate_all(bag(E), G, L) :- !, findall(E, G, L).
aggregate_all(set(E), G, S) :- !, findall(E, G, L), sort(L, S).
include(_, [], []).
include(P, [X|Xs], R) :- ( call(P, X) -> R = [X|R1] ; R = R1 ), include(P, Xs, R1).
exclude(_, [], []).
exclude(P, [X|Xs], R) :- ( call(P, X) -> R = R1 ; R = [X|R1] ), exclude(P, Xs, R1).
partition(_, [], [], []).
partition(P, [X|Xs], I, E) :- ( call(P, X) -> I = [X|I1], E = E1 ; I = I1, E = [X|E1] ), partition(P, Xs, I1, E1).
is_dict(json(_)).
get_dict(K, json(Pairs), V) :- member(P, Pairs), ( P = (K=V) ; P = (K-V) ; P = (K:V) ).
put_dict(K, json(Pairs), V, json(New)) :- '$tea_put'(Pairs, K, V, New).
'$tea_put'([], K, V, [K=V]).
'$tea_put'([P|Ps], K, V, [K=V|Ps]) :- ( P = (K0=_) ; P = (K0-_) ; P = (K0:_) ), K0 == K, !.
'$tea_put'([P|Ps], K, V, [P|Ns]) :- '$tea_put'(Ps, K, V, Ns).
dict_pairs(json(Pairs), _, KVs) :- nonvar(Pairs), !, findall(K-V, get_dict(K, json(Pairs), V), KVs0), keysort(KVs0, KVs).
dict_pairs(json(Pairs), _, KVs) :- findall(K=V, member(K-V, KVs), Pairs).
msort(L, S) :- maplist('$tea_pair', L, Ps), keysort(Ps, Sorted), maplist('$tea_pair', S, Sorted).
'$tea_pair'(X, X-x).
max_list([X|Xs], M) :- foldl('$tea_max', Xs, X, M).
min_list([X|Xs], M) :- foldl('$tea_min', Xs, X, M).
'$tea_max'(X, M0, M) :- M is max(X, M0).
'$tea_min'(X, M0, M) :- M is min(X, M0).
max_member(M, [X|Xs]) :- foldl('$tea_max_member', Xs, X, M).
min_member(M, [X|Xs]) :- foldl('$tea_min_member', Xs, X, M).
'$tea_max_member'(X, M0, M) :- ( X @> M0 -> M = X ; M = M0 ).
'$tea_min_member'(X, M0, M) :- ( X @< M0 -> M = X ; M = M0 ).
subtract([], _, []).
subtract([X|Xs], Ys, R) :- ( memberchk(X, Ys) -> R = R1 ; R = [X|R1] ), subtract(Xs, Ys, R1).
delete([], _, []).
delete([X|Xs], D, R) :- ( X \= D -> R = [X|R1] ; R = R1 ), delete(Xs, D, R1).
plus(A, B, C) :- ( nonvar(A), nonvar(B) -> C is A + B ; nonvar(A), nonvar(C) -> B is C - A ; A is C - B ).
atom_number(A, N) :- atom(A), atom_chars(A, Cs), catch(number_chars(N, Cs), _, fail).
tab(N) :- forall(between(1, N, _), write(' ')).
print(T) :- write(T).
ignore(G) :- ( call(G) -> true ; true ).
atom_to_term(A, T, Bindings) :- '$tea_to_chars'(A, Cs), read_term_from_chars(Cs, T, [variable_names(Bindings)]).
nb_setval(K, V) :-
    '$tea_limits'(limits(_, _, _, AssertUnits, _, _)),
    '$tea_bounded'(K-V, AssertUnits, 'a global variable''s value'),
    retractall('$tea_global'(K, _)), assertz('$tea_global'(K, V)).
b_setval(K, V) :- nb_setval(K, V).
nb_getval(K, V) :- '$tea_global'(K, V0), !, V = V0.
b_getval(K, V) :- nb_getval(K, V).

% SWI-Prolog's format/2 with an atom as the format, and format/3 into atom(A), string(S),
% codes(Cs) or chars(Cs) (no other stream: the sandbox refuses it).
'$tea_sink'(S) :- nonvar(S), ( S = atom(_) ; S = string(_) ; S = codes(_) ; S = chars(_) ), !.
'$tea_format'(F, As) :- '$tea_to_chars'(F, Fs), ( is_list(As) -> As1 = As ; As1 = [As] ), format(Fs, As1).
'$tea_format'(Sink, F, As) :-
    (   '$tea_sink'(Sink) -> true ; throw(error(permission_error(output, stream, Sink), format/3)) ),
    '$tea_to_chars'(F, Fs), ( is_list(As) -> As1 = As ; As1 = [As] ),
    phrase(format_(Fs, As1), Cs),
    (   Sink = atom(A) -> atom_chars(A, Cs)
    ;   Sink = string(S) -> S = Cs
    ;   Sink = codes(C) -> maplist(char_code, Cs, C)
    ;   Sink = chars(C) -> C = Cs
    ).

% Answers once everything above loaded (the Rust side checks it before it runs a block).
'$tea_support_loaded'(ok).
